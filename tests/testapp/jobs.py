"""Jobs the test suite runs. Side effects are counted in ``Effect`` rows or ``CALLS``."""

from __future__ import annotations

import contextlib
import time
from collections import Counter
from typing import Any

from django_durable_jobs import job

from .models import Effect

#: In-process call counters, reset by the ``calls`` fixture.
CALLS: Counter[str] = Counter()
#: Step names that raise once (fault injection), consumed when they fire.
FAIL_ONCE: set[str] = set()


def effect(name: str, run_id: str = "") -> str:
    """A side effect that leaves a row behind, so replays can be counted."""
    CALLS[name] += 1
    Effect.objects.create(name=name, run_id=run_id)
    if name in FAIL_ONCE:
        FAIL_ONCE.discard(name)
        raise RuntimeError(f"injected failure in {name}")
    return name


@job(name="tests.noop")
def noop(ctx: Any) -> None:
    return None


@job(name="tests.add")
def add(ctx: Any, a: int, b: int) -> int:
    return int(ctx.step.run("add", lambda: a + b))


@job(name="tests.three_steps", retries=2, backoff=0)
def three_steps(ctx: Any, user_id: int) -> dict[str, Any]:
    first = ctx.step.run("one", effect, "one", ctx.run_id)
    second = ctx.step.run("two", effect, "two", ctx.run_id)
    third = ctx.step.run("three", effect, "three", ctx.run_id)
    return {"steps": [first, second, third], "user_id": user_id}


@job(name="tests.onboarding", retries=1, backoff="1s")
def onboarding(ctx: Any, user_id: int) -> dict[str, Any]:
    user = ctx.step.run("load-user", lambda: {"id": user_id, "email": f"u{user_id}@example.com"})
    ctx.step.run("send-welcome", effect, "welcome", ctx.run_id)
    ctx.step.sleep("3d")
    order = ctx.step.wait_for_event("wait-order", "order.paid", match=str(user_id), timeout="7d")
    if order is None:
        ctx.step.run("nudge", effect, "nudge", ctx.run_id)
    return {"ordered": order is not None, "email": user["email"], "order": order}


@job(name="tests.always_fails", retries=2, backoff="10s")
def always_fails(ctx: Any) -> None:
    ctx.step.run("boom", effect, "boom-before", ctx.run_id)
    raise ValueError("always fails")


@job(name="tests.bad_output", retries=3)
def bad_output(ctx: Any) -> None:
    ctx.step.run("nan", lambda: float("nan"))


@job(name="tests.required_wait")
def required_wait(ctx: Any) -> Any:
    return ctx.step.wait_for_event("must", "never.happens", timeout="1h", required=True)


@job(name="tests.pooled", retries=2, backoff=0)
def pooled(ctx: Any, key: str) -> Any:
    """A step, an event, an atomic step: the flow ``test_pgbouncer`` runs through a
    pooler (the atomic step's record and row lock in one statement sent as text)."""
    ctx.step.run("before", effect, "pooled-before", ctx.run_id)
    paid = ctx.step.wait_for_event("paid", "pooled.paid", match=key, timeout="1h")
    ctx.step.atomic("after", effect, "pooled-after", ctx.run_id)
    return paid


@job(name="tests.pooled_nap", retries=2, backoff=0)
def pooled_nap(ctx: Any, key: str) -> Any:
    """A step, a sleep, an event, an atomic step: ``test_pgbouncer``'s workers listen
    on a direct connection beside the pooler (``LISTEN_DATABASE``)."""
    ctx.step.run("before", effect, "nap-before", ctx.run_id)
    ctx.step.sleep("nap", "1s")
    paid = ctx.step.wait_for_event("paid", "pooled.nap", match=key, timeout="1h")
    ctx.step.atomic("after", effect, "nap-after", ctx.run_id)
    return paid


@job(name="tests.swallower")
def swallower(ctx: Any) -> str:
    try:
        ctx.step.sleep("1h")
    except Exception:  # a user's broad except must not swallow the suspension
        return "swallowed"
    return "slept"


@job(name="tests.cancelled_midway", retries=3)
def cancelled_midway(ctx: Any) -> None:
    from django_durable_jobs.models import JobRun

    ctx.step.run("one", effect, "c-one", ctx.run_id)
    # An operator cancels the run while it executes (as runs.cancel does), the first
    # time only: a retry of the run goes on.
    if not Effect.objects.filter(name="c-cancelled", run_id=ctx.run_id).exists():
        Effect.objects.create(name="c-cancelled", run_id=ctx.run_id)
        JobRun.objects.filter(pk=ctx.run_id).update(status="cancelled")
    ctx.step.run("two", effect, "c-two", ctx.run_id)
    ctx.step.run("three", effect, "c-three", ctx.run_id)


def _cancelled_while_it_works(run_id: str) -> str:
    """An operator cancels the run (``runs.cancel``) while this step works, the first
    time only: a retry of the run goes on."""
    from django_durable_jobs.verbs import runs

    if not Effect.objects.filter(name="w-cancelled", run_id=run_id).exists():
        Effect.objects.create(name="w-cancelled", run_id=run_id)
        runs.cancel(run_id)
    return effect("w-two", run_id)


@job(name="tests.cancelled_in_a_step", retries=3)
def cancelled_in_a_step(ctx: Any) -> None:
    ctx.step.run("one", effect, "w-one", ctx.run_id)
    ctx.step.run("two", _cancelled_while_it_works, ctx.run_id)
    ctx.step.run("three", effect, "w-three", ctx.run_id)


@job(name="tests.stubborn", timeout="300ms", retries=3)
def stubborn(ctx: Any) -> str:
    import time

    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            time.sleep(10)
        except Exception:  # swallows the timeout; it is stopped anyway
            CALLS["stubborn-swallowed"] += 1
    return "escaped"


def start_recorded(run_id: str) -> bool:
    """Whether the worker recorded the start of ``run_id``'s attempt under the lease it
    holds (``JobRun.attempt_started_by``)."""
    from django_durable_jobs.models import JobRun

    row = JobRun.objects.values_list("attempt_started_by", "lease_owner").get(pk=run_id)
    return row[0] == row[1]


def start_recorded_within(run_id: str, seconds: float) -> bool:
    """Whether the start of ``run_id``'s attempt is recorded within ``seconds``."""
    deadline = time.monotonic() + seconds
    while not start_recorded(run_id) and time.monotonic() < deadline:
        time.sleep(0.01)
    return start_recorded(run_id)


@job(name="tests.waits_for_its_start_record", retries=0)
def waits_for_its_start_record(ctx: Any, seconds: float) -> bool:
    """Whether the start of this attempt got recorded while it ran (within ``seconds``)."""
    return start_recorded_within(ctx.run_id, seconds)


# Jobs of other test modules register when this module is autodiscovered.
from . import (  # noqa: E402,F401
    admin_jobs,
    async_jobs,
    atomic_jobs,
    event_jobs,
    fanout_jobs,
    fault_jobs,
    flow_jobs,
    hostile_jobs,
    message_jobs,
    schedule_jobs,
    worker_jobs,
)


@job(name="tests.huge_error", retries=0)
def huge_error(ctx: Any, size: int) -> None:
    """A step that fails with an error the size of an HTTP response body."""

    def fetch() -> None:
        raise RuntimeError("HTTP 502: " + "<html>" * (size // 6) + " end of body")

    ctx.step.run("fetch", fetch)


@job(name="tests.swallows_sleep", retries=3, backoff=0)
def swallows_sleep(ctx: Any) -> str:
    """Catches everything around a sleep: the Suspension too (a bug to report)."""
    with contextlib.suppress(BaseException):  # the mistake under test
        ctx.step.sleep("nap", "1h")
    ctx.step.run("after", effect, "after-nap", ctx.run_id)
    return "woke early"
