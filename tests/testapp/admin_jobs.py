"""Jobs for the operating tests (run verbs, admin, ``manage.py jobs``)."""

from __future__ import annotations

from typing import Any

from django_durable_jobs import job

from .jobs import effect


@job(name="tests.ops.fragile", retries=0)
def fragile(ctx: Any) -> list[str]:
    """Three steps, no retries: a failure in one (``FAIL_ONCE``) fails the run."""
    return [
        ctx.step.run(name, effect, f"fragile-{name}", ctx.run_id)
        for name in ("one", "two", "three")
    ]


@job(name="tests.ops.napper", retries=0)
def napper(ctx: Any) -> str:
    ctx.step.run("before", effect, "nap-before", ctx.run_id)
    ctx.step.sleep("3d")
    return str(ctx.step.run("after", effect, "nap-after", ctx.run_id))


@job(name="tests.ops.waiter", retries=0)
def waiter(ctx: Any, key: str) -> Any:
    ctx.step.run("before", effect, "wait-before", ctx.run_id)
    got = ctx.step.wait_for_event("wait-order", "order.paid", match=key, timeout="7d")
    ctx.step.run("after", effect, "wait-after", ctx.run_id)
    return got


@job(name="tests.ops.chatty", retries=0)
def chatty(ctx: Any, count: int) -> int:
    """``count`` steps, for pages with many steps."""
    for index in range(count):
        ctx.step.run(f"step-{index:03d}", lambda i=index: {"i": i})
    return count


@job(name="tests.ops.shouty", retries=0)
def shouty(ctx: Any) -> str:
    """An output and a failure that try to inject HTML."""
    ctx.step.run("html", lambda: {"html": "<script>alert('x')</script>"})
    raise ValueError("<b>bold</b> <script>alert('error')</script>")
