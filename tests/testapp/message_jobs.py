"""Jobs of the results-and-messages tests: receives, progress, results to wait for."""

from __future__ import annotations

from typing import Any

from django_durable_jobs import NonRetriable, job

from .jobs import effect


@job(name="tests.messages.approval", retries=2, backoff=0)
def approval(ctx: Any, order_id: int) -> dict[str, Any]:
    """Waits up to two days for a decision sent to the run (``approval``)."""
    ctx.step.run("ask", effect, f"ask-{order_id}", ctx.run_id)
    decision = ctx.step.receive("decision", "approval", timeout="2d")
    ctx.step.run("after", effect, f"after-{order_id}", ctx.run_id)
    return {"order_id": order_id, "decision": decision}


@job(name="tests.messages.inbox", retries=2, backoff=0)
def inbox(ctx: Any, count: int, topic: str = "item") -> list[Any]:
    """Receives ``count`` messages of ``topic``, one step each."""
    return [ctx.step.receive(f"take{i}", topic, timeout="1h") for i in range(count)]


@job(name="tests.messages.required", retries=0)
def required(ctx: Any) -> Any:
    return ctx.step.receive("must", "go", timeout="1h", required=True)


@job(name="tests.messages.ainbox", retries=2, backoff=0)
async def ainbox(ctx: Any, count: int) -> list[Any]:
    """``inbox`` as an ``async def`` job."""
    return [await ctx.step.receive(f"take{i}", "item", timeout="1h") for i in range(count)]


@job(name="tests.messages.counting", retries=0)
def counting(ctx: Any, total: int) -> int:
    """Reports progress in a tight loop, with no step in between."""
    for done in range(1, total + 1):
        ctx.set_progress({"done": done, "total": total})
    return total


@job(name="tests.messages.progress_then_sleep", retries=0)
def progress_then_sleep(ctx: Any) -> str:
    ctx.set_progress({"done": 1, "total": 2})
    ctx.step.sleep("nap", "1h")
    ctx.set_progress({"done": 2, "total": 2})
    return "done"


@job(name="tests.messages.aprogress", retries=0)
async def aprogress(ctx: Any) -> str:
    ctx.set_progress("half way")
    await ctx.step.sleep("nap", "1h")
    return "done"


@job(name="tests.messages.fails", retries=0)
def fails(ctx: Any) -> None:
    raise NonRetriable("the report's source is gone")


@job(name="tests.messages.double", retries=0)
def double(ctx: Any, n: int) -> int:
    return 2 * n
