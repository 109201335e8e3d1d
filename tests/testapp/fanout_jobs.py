"""Jobs for the fan-out tests (``step.invoke_all`` / ``step.map``)."""

from __future__ import annotations

import os
import signal
from typing import Any

from django_durable_jobs import job, signals
from django_durable_jobs.models import JobRun

from .flow_jobs import dunning, global_limit, welcome_once
from .jobs import CALLS, effect
from .models import Effect


@job(name="tests.fan.square", retries=0)
def square(ctx: Any, n: int, fail: bool = False) -> int:
    effect(f"square-{n}", ctx.run_id)
    if fail:
        raise ValueError(f"square {n} refuses")
    return n * n


@job(name="tests.fan.sleepy", retries=0)
def sleepy(ctx: Any, n: int) -> int:
    ctx.step.sleep("nap", "1h")
    return n


@job(name="tests.fan.squares", retries=2, backoff=0)
def squares(ctx: Any, count: int, failing: list[int] | None = None) -> dict[str, Any]:
    calls = [square.call(n, fail=n in (failing or [])) for n in range(count)]
    results = ctx.step.invoke_all("squares", calls)
    total = ctx.step.run("total", effect, f"total-{sum(results)}")
    return {"results": results, "total": total}


@job(name="tests.fan.mapped", retries=0)
def mapped(ctx: Any, items: list[int]) -> list[Any]:
    return list(ctx.step.map("map", square, items))


@job(name="tests.fan.limited", retries=0)
def limited(ctx: Any, items: list[int]) -> list[Any]:
    """Fans out a job with ``concurrency=2``."""
    return list(ctx.step.map("map", global_limit, items))


@job(name="tests.fan.dunning", retries=0)
def dunnings(ctx: Any, invoices: list[int]) -> list[Any]:
    """Fans out a job with ``cancel_on`` (one child per invoice)."""
    return list(ctx.step.map("dun", dunning, invoices))


@job(name="tests.fan.rate_limited", retries=0)
def rate_limited(ctx: Any) -> list[Any]:
    """Fans out a job with ``rate_limit``, which a fan-out cannot apply."""
    return list(ctx.step.map("welcome", welcome_once, [1, 2]))


@job(name="tests.fan.slow", retries=0)
def slow(ctx: Any) -> list[Any]:
    return list(ctx.step.invoke_all("naps", [sleepy.call(1), square.call(2)], timeout="10m"))


@job(name="tests.fan.flaky", retries=0)
def flaky(ctx: Any, n: int) -> int:
    """Child 1 fails the first time it runs (counted in the database, so it holds across
    worker processes) and succeeds after."""
    effect(f"flaky-{n}", ctx.run_id)
    if n == 1 and Effect.objects.filter(name="flaky-1").count() == 1:
        raise ValueError("flaky 1 refuses the first time")
    return n * 10


@job(name="tests.fan.flaky_all", retries=0)
def flaky_all(ctx: Any, count: int) -> list[Any]:
    return list(ctx.step.map("flaky", flaky, range(count)))


@job(name="tests.fan.bad", retries=0)
def bad(ctx: Any) -> list[Any]:
    return list(ctx.step.invoke_all("bad", [square.call(1), (square, 2)]))


def _die_after_children_insert(sender: Any, run: JobRun, **kwargs: Any) -> None:
    """Fault injection for tests/processes/verbs/test_fanout.py: a worker started with
    DURABLE_JOBS_TEST_DIE_AFTER_FANOUT kills itself (SIGKILL) right after the children
    of a fan-out are inserted, before the step that started them is recorded."""
    child = (run.idempotency_key or "").startswith("fanout:")
    if child and os.environ.get("DURABLE_JOBS_TEST_DIE_AFTER_FANOUT"):
        CALLS["dying"] += 1
        os.kill(os.getpid(), signal.SIGKILL)


signals.run_enqueued.connect(_die_after_children_insert, dispatch_uid="tests.fan.die")
