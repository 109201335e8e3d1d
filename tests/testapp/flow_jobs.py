"""Jobs for flow control (SPEC §8): retries on request, failure handlers, limits."""

from __future__ import annotations

from typing import Any

from django_durable_jobs import NonRetriable, RetryAfter, job

from .models import Effect


def _raise(error: Exception) -> None:
    raise error


@job(name="tests.retry_after", retries=2, backoff="1h")
def retry_after(ctx: Any, where: str) -> int:
    Effect.objects.create(name=f"attempt-{ctx.attempt}", run_id=ctx.run_id)
    if ctx.attempt == 1 or where == "always":
        if where == "step":
            ctx.step.run("call-api", _raise, RetryAfter("30s", "the API said 429"))
        raise RetryAfter(30)
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


@job(name="tests.handler_of_handler", retries=0, on_failure="tests.failure_handler")
def failing_handler(ctx: Any, failure: dict[str, Any]) -> None:
    raise RuntimeError("handler broke")


@job(name="tests.fails_into_failing_handler", retries=0, on_failure=failing_handler)
def fails_into_failing_handler(ctx: Any) -> None:
    raise ValueError("first failure")
