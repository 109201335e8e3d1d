"""Jobs for flow control: retries on request, failure handlers, limits."""

from __future__ import annotations

import os
import time
from typing import Any

from django_durable_jobs import (
    CancelOn,
    Concurrency,
    Debounce,
    NonRetriable,
    RateLimit,
    RetryAfter,
    Throttle,
    job,
)

from .models import Effect, Execution


def _raise(error: Exception) -> None:
    raise error


@job(name="tests.retry_after", retries=2, backoff="1h")
def retry_after(ctx: Any, where: str, delay: int = 30) -> int:
    """``delay``: the seconds RetryAfter asks for (as a duration text inside the step)."""
    Effect.objects.create(name=f"attempt-{ctx.attempt}", run_id=ctx.run_id)
    if ctx.attempt == 1 or where == "always":
        if where == "step":
            ctx.step.run("call-api", _raise, RetryAfter(f"{delay}s", "the API said 429"))
        raise RetryAfter(delay)
    return int(ctx.attempt)


@job(name="tests.non_retriable", retries=5)
def non_retriable(ctx: Any, where: str) -> None:
    Effect.objects.create(name=f"attempt-{ctx.attempt}", run_id=ctx.run_id)
    if where == "step":
        ctx.step.run("load", _raise, NonRetriable("customer 42 was deleted"))
    raise NonRetriable("customer 42 was deleted")


@job(name="tests.failure_handler", retries=0)
def failure_handler(ctx: Any, failure: dict[str, Any]) -> None:
    Effect.objects.create(name=f"handled:{failure['run_id']}", run_id=ctx.run_id)
    if failure["kwargs"].get("handler_fails"):
        raise RuntimeError("the handler fails too")


@job(name="tests.fails_with_handler", retries=1, backoff=0, on_failure=failure_handler)
def fails_with_handler(ctx: Any, handler_fails: bool = False) -> None:
    raise ValueError("nightly import broke")


@job(name="tests.sleeps_with_handler", on_failure="tests.failure_handler")
def sleeps_with_handler(ctx: Any) -> None:
    ctx.step.sleep("1h")


@job(name="tests.invokes_handled_children")
def invokes_handled_children(ctx: Any) -> None:
    """A parent whose child has a failure handler."""
    ctx.step.invoke("one", sleeps_with_handler)


@job(name="tests.handler_of_handler", retries=0, on_failure="tests.failure_handler")
def failing_handler(ctx: Any, failure: dict[str, Any]) -> None:
    raise RuntimeError("handler broke")


@job(name="tests.fails_into_failing_handler", retries=0, on_failure=failing_handler)
def fails_into_failing_handler(ctx: Any) -> None:
    raise ValueError("first failure")


def _log_execution(ctx: Any, seconds: float) -> None:
    """Log (start, end) of this execution from inside the run, for overlap checks."""
    row = Execution.objects.create(
        run_id=ctx.run_id, attempt=ctx.attempt, pid=os.getpid(), started_ns=time.time_ns()
    )
    time.sleep(seconds)
    Execution.objects.filter(pk=row.pk).update(ended_ns=time.time_ns())


@job(name="tests.per_customer", retries=0, concurrency=Concurrency(2, key="customer_id"))
def per_customer(ctx: Any, customer_id: int, seconds: float = 0.01) -> int:
    _log_execution(ctx, seconds)
    return customer_id


@job(name="tests.global_limit", retries=0, concurrency=2)
def global_limit(ctx: Any, n: int, seconds: float = 0.01) -> int:
    _log_execution(ctx, seconds)
    return n


@job(name="tests.throttled", retries=0, throttle=Throttle(5, per="1s"))
def throttled(ctx: Any, n: int) -> int:
    _log_execution(ctx, 0)
    return n


def _block(run_id: str, attempt: int, seconds: float) -> int:
    Effect.objects.create(name=f"block-started-{attempt}", run_id=run_id)
    if attempt == 1:
        time.sleep(seconds)
    return attempt


@job(name="tests.one_per_key", retries=2, backoff=0, concurrency=Concurrency(1, key="key"))
def one_per_key(ctx: Any, key: str, block: float = 0) -> int:
    return int(ctx.step.run("block", _block, ctx.run_id, ctx.attempt, block))


@job(
    name="tests.by_region",
    concurrency=Concurrency(1, key=lambda account: account["region"]),
)
def by_region(ctx: Any, account: dict[str, Any]) -> None:
    ctx.step.sleep("1m")


@job(name="tests.digest", debounce=Debounce("5m", key="user_id", timeout="1h"))
def digest(ctx: Any, user_id: int, edits: list[str]) -> list[str]:
    Effect.objects.create(name=f"digest:{user_id}:{','.join(edits)}", run_id=ctx.run_id)
    return edits


@job(name="tests.welcome_once", rate_limit=RateLimit(1, per="1h", key="user_id"))
def welcome_once(ctx: Any, user_id: int) -> int:
    Effect.objects.create(name=f"welcome:{user_id}", run_id=ctx.run_id)
    return user_id


def _until_cancelled(run_id: str) -> None:
    """Block until the run is cancelled, then long enough for the heartbeat to see it."""
    from django_durable_jobs.models import JobRun

    Effect.objects.create(name="dunning-started", run_id=run_id)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if JobRun.objects.filter(pk=run_id, status="cancelled").exists():
            time.sleep(2)  # the heartbeat (0.5 s in tests) notices within this
            return
        time.sleep(0.05)


@job(
    name="tests.dunning",
    retries=0,
    cancel_on=[CancelOn("invoice.paid", match="invoice_id"), CancelOn("customer.deleted")],
    on_failure="tests.failure_handler",
)
def dunning(ctx: Any, invoice_id: int, block: bool = False, wait: bool = False) -> None:
    if block:
        ctx.step.run("remind", _until_cancelled, ctx.run_id)
    elif wait:  # for the customer's reply; the paid invoice cancels it first
        ctx.step.wait_for_event("reply", "customer.replied", match=str(invoice_id), timeout="7d")
    else:
        ctx.step.sleep("3d")
    ctx.step.run("charge", _charge, ctx.run_id)


def _charge(run_id: str) -> str:
    Effect.objects.create(name="charged", run_id=run_id)
    return "charged"


@job(name="tests.quick_digest", debounce=Debounce("1s", key="user_id", timeout="10s"))
def quick_digest(ctx: Any, user_id: int, edits: list[str]) -> list[str]:
    Effect.objects.create(name=f"digest:{','.join(edits)}", run_id=ctx.run_id)
    return edits


@job(name="tests.invokes_gated", retries=3)
def invokes_gated(ctx: Any, user_id: int) -> int:
    """Awaits a rate-limited job as a child: a skipped child would never finish."""
    return int(ctx.step.invoke("welcome", welcome_once, user_id, timeout="1h"))
