"""``ctx.set_progress`` (engine/progress.py) on a fake clock: the newest value wins, it
is written at most every 500 ms, at a step's start once due, and always at the stop."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from django_durable_jobs.engine.attempt import JobContext, run_logger
from django_durable_jobs.engine.clock import FakeClock
from django_durable_jobs.engine.memory import MemoryEventLog, MemoryStepStore
from django_durable_jobs.engine.progress import EVERY, Progress
from django_durable_jobs.engine.sync_steps import Steps
from django_durable_jobs.engine.timeouts import TimeGuard
from django_durable_jobs.exceptions import InvalidPayload


class Writes:
    def __init__(self) -> None:
        self.values: list[Any] = []

    def __call__(self, value: Any) -> None:
        self.values.append(value)


def test_a_tight_loop_writes_once_then_the_last_value_at_the_stop() -> None:
    clock, writes = FakeClock(), Writes()
    progress = Progress(writes, clock)
    for done in range(1, 10_001):
        progress.set({"done": done, "total": 10_000})
    assert writes.values == [{"done": 1, "total": 10_000}]  # not one write per call
    progress.flush_at_stop()
    assert writes.values[-1] == {"done": 10_000, "total": 10_000}
    assert len(writes.values) == 2


def test_a_value_is_written_at_once_when_the_last_write_is_old_enough() -> None:
    clock, writes = FakeClock(), Writes()
    progress = Progress(writes, clock)
    progress.set(1)
    clock.advance(EVERY - timedelta(milliseconds=1))
    progress.set(2)
    assert writes.values == [1]
    clock.advance(timedelta(milliseconds=1))
    progress.set(3)
    assert writes.values == [1, 3]  # 2 was superseded: last write wins
    progress.flush_at_stop()
    assert writes.values == [1, 3]  # nothing waits


def test_an_async_job_s_value_waits_for_a_step_or_the_stop() -> None:
    clock, writes = FakeClock(), Writes()
    progress = Progress(writes, clock, inline=False)
    progress.set("half")
    assert writes.values == [] and progress.due()
    progress.flush()
    assert writes.values == ["half"]


def test_a_waiting_value_is_written_when_the_next_step_starts_once_due() -> None:
    clock, writes = FakeClock(), Writes()
    progress = Progress(writes, clock)
    steps = Steps(
        run_id="r",
        job_name="demo",
        store=MemoryStepStore(),
        events=MemoryEventLog(clock),
        clock=clock,
        progress=progress,
        guard=TimeGuard(use_signals=False),
    )
    progress.set(1)
    progress.set(2)  # kept: written 0 ms ago
    steps.run("a", lambda: None)
    assert writes.values == [1]
    clock.advance(EVERY)
    steps.run("b", lambda: None)
    assert writes.values == [1, 2]


def test_progress_is_not_a_step() -> None:
    clock = FakeClock()
    store = MemoryStepStore()
    steps = Steps(
        run_id="r", job_name="demo", store=store, events=MemoryEventLog(clock), clock=clock
    )
    ctx = JobContext(
        step=steps, run_id="r", attempt=1, job_name="demo", logger=run_logger("r", "demo", 1)
    )
    ctx.set_progress({"done": 1, "total": 2})
    assert ctx.progress.value == {"done": 1, "total": 2}
    assert store.list("r") == []


@pytest.mark.parametrize("value", [float("nan"), object(), "nul\x00"])
def test_a_value_that_cannot_be_stored_is_refused_at_the_call(value: Any) -> None:
    writes = Writes()
    with pytest.raises(InvalidPayload, match="set_progress"):
        Progress(writes, FakeClock()).set(value)
    assert writes.values == []


def test_a_failed_write_at_the_stop_is_logged_not_raised(caplog: pytest.LogCaptureFixture) -> None:
    def broken(value: Any) -> None:
        raise RuntimeError("connection lost")

    progress = Progress(broken, FakeClock(), inline=False)
    progress.set(1)
    progress.flush_at_stop()
    assert "not written: connection lost" in caplog.text


def test_a_value_set_on_an_event_loop_waits_for_the_stop() -> None:
    """An async task of a sync job (``django.tasks``): its thread runs a loop, where a
    database write would block it."""
    import asyncio

    writes = Writes()
    progress = Progress(writes, FakeClock())

    async def task() -> None:
        progress.set("from a coroutine")

    asyncio.run(task())
    assert writes.values == [] and progress.waiting
    progress.flush_at_stop()
    assert writes.values == ["from a coroutine"]
