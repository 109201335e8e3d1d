"""The step calls an async attempt remembers until it ends, for its checks: a call never
awaited fails the run (``AsyncSteps.check_awaited``), and a step still executing in a
task of its own is waited for (``finish_started``). Those that finished are forgotten
now and then, so that a long job does not keep them all; the work of forgetting is
counted here (every look at a call's state), not timed."""

from __future__ import annotations

import asyncio
import inspect
from typing import Any

import pytest

from django_durable_jobs.engine.async_steps import AsyncSteps, inline
from django_durable_jobs.engine.clock import FakeClock
from django_durable_jobs.engine.memory import MemoryEventLog, MemoryStepStore
from django_durable_jobs.engine.records import StepStatus
from django_durable_jobs.exceptions import StepUsageError


def engine(store: MemoryStepStore) -> AsyncSteps:
    return AsyncSteps(
        run_id="r",
        job_name="demo",
        store=store,
        events=MemoryEventLog(),
        clock=FakeClock(),
        io=inline,
    )


@pytest.fixture
def looks(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many times a coroutine's state was read (``inspect.getcoroutinestate``)."""
    counted = [0]
    state = inspect.getcoroutinestate

    def counting(coroutine: Any) -> str:
        counted[0] += 1
        return state(coroutine)

    monkeypatch.setattr(inspect, "getcoroutinestate", counting)
    return counted


async def double(n: int) -> int:
    return n * 2


@pytest.mark.parametrize("calls", [1_000, 5_000])
def test_a_gather_of_thousands_of_steps_looks_at_each_call_a_bounded_number_of_times(
    looks: list[int], calls: int
) -> None:
    """Every call past the 256th looked at every call made so far (none had finished:
    gather starts them once all are made): 5,000 calls were 12 million looks, the event
    loop blocked 1.8 s. The looks are now at most twice the calls, whatever their count."""
    store = MemoryStepStore()
    steps = engine(store)

    async def job() -> list[Any]:
        pending = [steps.run(f"double-{n}", double, n) for n in range(calls)]
        made = looks[0]
        results = await asyncio.gather(*pending)
        steps.check_awaited()
        return [made, results]

    made, results = asyncio.run(job())
    assert made <= 2 * calls
    assert results == [n * 2 for n in range(calls)]
    assert len(store.list("r")) == calls


def test_a_long_job_looks_at_each_call_a_bounded_number_of_times(looks: list[int]) -> None:
    """Awaited one after another, a mix of calls that finished and calls still pending."""
    steps = engine(MemoryStepStore())

    async def job() -> int:
        pending = []
        for n in range(3_000):
            if n % 3 == 0:
                pending.append(steps.run(f"later-{n}", double, n))  # gathered at the end
            else:
                await steps.run(f"now-{n}", double, n)
        made = looks[0]
        await asyncio.gather(*pending)
        steps.check_awaited()
        return made

    assert asyncio.run(job()) <= 2 * 3_000


def test_a_call_never_awaited_is_found_among_thousands_that_were() -> None:
    """What the forgetting must keep: the call made first and never awaited is still
    named after thousands of calls that finished, and no other is."""
    steps = engine(MemoryStepStore())

    async def job() -> None:
        forgotten = steps.run("forgotten", double, 0)
        for n in range(2_000):
            await steps.run(f"awaited-{n}", double, n)
        gathered = [steps.run(f"gathered-{n}", double, n) for n in range(2_000)]
        await asyncio.gather(*gathered)
        assert inspect.getcoroutinestate(forgotten) == inspect.CORO_CREATED
        steps.check_awaited()

    with pytest.raises(StepUsageError, match=r"ctx\.step\.run\('forgotten'\) was never") as err:
        asyncio.run(job())
    assert "awaited-" not in str(err.value) and "gathered-" not in str(err.value)


def test_a_step_executing_in_a_task_is_waited_for_after_thousands_of_calls() -> None:
    """What the forgetting must keep: the attempt's end waits for a step still executing
    in a task of its own (its record is written), however many calls came after it."""
    store = MemoryStepStore()
    steps = engine(store)
    release = asyncio.Event()

    async def slow() -> str:
        await release.wait()
        return "slow"

    async def job() -> None:
        task = asyncio.ensure_future(steps.run("slow", slow))
        for n in range(2_000):
            await steps.run(f"awaited-{n}", double, n)
        asyncio.get_running_loop().call_later(0.01, release.set)
        await steps.finish_started()
        assert task.done()
        record = store.get("r", "slow")
        assert record is not None and record.status is StepStatus.COMPLETED

    asyncio.run(job())
