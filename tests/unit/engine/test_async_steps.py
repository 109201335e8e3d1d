"""What only async jobs have: awaited step functions, cancellation as the time limit,
writes that finish whole when the run is cancelled. The rest of the engine's contract
runs for async jobs in ``test_steps.py`` (its harness is parametrized)."""

from __future__ import annotations

import asyncio
import threading
from datetime import timedelta
from typing import Any

import pytest

from django_durable_jobs.engine.async_steps import AsyncSteps, inline
from django_durable_jobs.engine.clock import FakeClock
from django_durable_jobs.engine.core import StepLimits
from django_durable_jobs.engine.memory import MemoryEventLog, MemoryStepStore
from django_durable_jobs.engine.records import RecordedStep, StepStatus
from django_durable_jobs.exceptions import JobTimeoutError, Suspension


def engine(store: MemoryStepStore, **options: Any) -> AsyncSteps:
    return AsyncSteps(
        run_id="r",
        job_name="demo",
        store=store,
        events=MemoryEventLog(),
        clock=FakeClock(),
        **options,
    )


def test_an_async_step_function_is_awaited_and_memoized() -> None:
    store, calls = MemoryStepStore(), []

    async def fetch(url: str) -> dict[str, str]:
        calls.append(url)
        await asyncio.sleep(0)
        return {"url": url}

    async def job(steps: AsyncSteps) -> Any:
        return await steps.run("fetch", fetch, "https://example.com/é")

    assert asyncio.run(job(engine(store, io=inline))) == {"url": "https://example.com/é"}
    assert asyncio.run(job(engine(store, io=inline))) == {"url": "https://example.com/é"}
    assert calls == ["https://example.com/é"]  # not re-executed on replay


def test_a_sync_step_function_runs_off_the_event_loop() -> None:
    threads: list[threading.Thread] = []

    def blocking() -> str:
        threads.append(threading.current_thread())
        return "done"

    async def job() -> Any:
        return await engine(MemoryStepStore()).run("blocking", blocking)  # default io: a thread

    assert asyncio.run(job()) == "done"
    assert threads[0] is not threading.main_thread()


def test_suspension_inside_an_async_step_is_not_a_failure() -> None:
    store = MemoryStepStore()
    steps = engine(store, io=inline)

    async def nested() -> None:
        await steps.sleep("inner", "1h")

    async def job() -> None:
        try:
            await steps.run("outer", nested)
        except Exception:  # a user's handler cannot swallow a suspension
            pytest.fail("the suspension was caught as an Exception")

    with pytest.raises(Suspension):
        asyncio.run(job())
    assert store.get("r", "outer") is None  # not recorded as failed


def test_step_timeout_cancels_the_awaited_step_and_fails_it() -> None:
    store = MemoryStepStore()
    steps = engine(store, io=inline, limits=StepLimits(step_timeout=timedelta(milliseconds=100)))
    cancelled = []

    async def hangs() -> None:
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            cancelled.append(True)
            raise

    with pytest.raises(JobTimeoutError, match="step_timeout") as info:
        asyncio.run(steps.run("hang", hangs))
    assert info.value.code == "X_JOB_TIMEOUT" and cancelled == [True]
    record = store.get("r", "hang")
    assert record is not None and record.status is StepStatus.FAILED


def test_a_steps_own_timeout_error_is_a_plain_failure() -> None:
    store = MemoryStepStore()
    steps = engine(store, io=inline, limits=StepLimits(step_timeout=timedelta(seconds=30)))

    async def gives_up() -> None:
        raise TimeoutError("the API did not answer")

    with pytest.raises(TimeoutError, match="did not answer"):
        asyncio.run(steps.run("call", gives_up))
    record = store.get("r", "call")
    assert record is not None and record.error is not None
    assert record.error.type == "builtins.TimeoutError"


class SlowStore(MemoryStepStore):
    """A store whose writes take a while, to cancel a run in the middle of one."""

    def __init__(self) -> None:
        super().__init__()
        self.writing = threading.Event()

    def put(self, record: RecordedStep) -> None:
        self.writing.set()
        threading.Event().wait(0.3)
        super().put(record)


def test_a_write_under_way_finishes_when_the_run_is_cancelled() -> None:
    store = SlowStore()
    steps = engine(store)  # io in a thread, like the worker's

    async def job() -> None:
        task = asyncio.create_task(steps.run("charge", lambda: "receipt-1"))
        while not store.writing.is_set():
            await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        record = store.get("r", "charge")  # already there when the cancellation lands
        assert record is not None and record.status is StepStatus.COMPLETED

    asyncio.run(job())
