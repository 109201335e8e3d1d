"""Async jobs the test suite runs (imported by ``jobs.py``, so workers register them)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
import time
from typing import Any

from django_durable_jobs import NonRetriable, RetryAfter, job

from .jobs import effect, start_recorded_within
from .models import Effect, Execution


async def fetch(value: str) -> str:
    await asyncio.sleep(0)
    return value.upper()


@job(name="tests.async_three_steps", retries=2, backoff=0)
async def async_three_steps(ctx: Any, user_id: int) -> dict[str, Any]:
    first = await ctx.step.run("one", effect, "one", ctx.run_id)
    second = await ctx.step.run("two", fetch, "two")
    third = await ctx.step.run("three", effect, "three", ctx.run_id)
    return {"steps": [first, second, third], "user_id": user_id}


@job(name="tests.async_onboarding", retries=1, backoff="1s")
async def async_onboarding(ctx: Any, user_id: int) -> dict[str, Any]:
    await ctx.step.run("send-welcome", effect, "welcome", ctx.run_id)
    try:
        await ctx.step.sleep("3d")
    except Exception:  # a suspension is not an Exception: never reached
        await ctx.step.run("swallowed", effect, "swallowed", ctx.run_id)
    order = await ctx.step.wait_for_event("wait-order", "order.paid", match=str(user_id))
    await ctx.step.publish("announce", "user.onboarded", {"user_id": user_id}, key=str(user_id))
    return {"ordered": order is not None, "order": order}


@job(name="tests.async_timeout", timeout="300ms", retries=3)
async def async_timeout(ctx: Any) -> str:
    await ctx.step.run("before", effect, "before", ctx.run_id)
    await asyncio.sleep(30)
    return "never"


@job(name="tests.async_step_timeout", step_timeout="200ms", retries=0)
async def async_step_timeout(ctx: Any) -> str:
    return str(await ctx.step.run("hang", asyncio.sleep, 30))


@job(name="tests.async_io", retries=3, backoff=0)
async def async_io(ctx: Any, seconds: float, tag: str = "") -> str:
    """One side effect, then an I/O wait in a step (the workload of the process tests
    and the I/O benchmark)."""
    await ctx.step.run("touch", effect, f"touch{tag}", ctx.run_id)
    await ctx.step.run("io", asyncio.sleep, seconds)
    return "done"


@job(name="tests.async_hang_once", retries=3, backoff=0)
async def async_hang_once(ctx: Any) -> str:
    """Touches, then hangs in a step on its first attempt only (a worker to kill)."""
    await ctx.step.run("touch", effect, "touch", ctx.run_id)
    await ctx.step.run("io", asyncio.sleep, 120 if ctx.attempt == 1 else 0.01)
    await ctx.step.run("after", effect, "after", ctx.run_id)
    return "done"


@job(name="tests.async_logged", retries=0)
async def async_logged(ctx: Any, n: int) -> int:
    """``tests.logged`` for async jobs: logs every execution (overlap detection)."""
    row = await Execution.objects.acreate(
        run_id=ctx.run_id, attempt=ctx.attempt, pid=os.getpid(), started_ns=time.time_ns()
    )
    value = int(await ctx.step.run("work", _double, n))
    await Execution.objects.filter(pk=row.pk).aupdate(ended_ns=time.time_ns())
    return value


async def _double(n: int) -> int:
    await asyncio.sleep(0.001)
    return n * 2


@job(name="tests.async_forgot_await", retries=3, backoff=0)
async def async_forgot_await(ctx: Any, returned: bool) -> Any:
    """A step called without ``await`` (the newcomer's slip): its coroutine is made and
    dropped, or returned as the job's value."""
    pending = ctx.step.run("send", effect, "sent", ctx.run_id)
    if returned:
        return pending
    await ctx.step.run("after", effect, "after", ctx.run_id)
    return "done"


@job(name="tests.async_gathered", retries=0)
async def async_gathered(ctx: Any) -> list[Any]:
    """Steps awaited through ``asyncio.gather`` (tasks): awaited, though not directly."""
    return list(
        await asyncio.gather(
            ctx.step.run("a", effect, "a", ctx.run_id), ctx.step.run("b", effect, "b", ctx.run_id)
        )
    )


@job(name="tests.async_swallows_sleep", retries=3, backoff=0)
async def async_swallows_sleep(ctx: Any) -> str:
    with contextlib.suppress(BaseException):  # the mistake under test
        await ctx.step.sleep("nap", "1h")
    return "woke early"


@job(name="tests.async_blocks_the_loop", retries=3, timeout="100ms")
async def async_blocks_the_loop(ctx: Any, swallow: bool) -> str:
    """Past its timeout without the cancellation landing: the loop is blocked by a sync
    sleep, or the job catches the CancelledError and carries on."""
    if swallow:
        with contextlib.suppress(BaseException):  # the mistake under test
            await asyncio.sleep(0.4)
    else:
        time.sleep(0.3)
    return "late"


#: Released by the test that hangs ``async_hangs_in_a_sync_step``'s step functions.
RELEASE = threading.Event()


#: The ``_hang`` calls that returned.
RETURNED: list[str] = []


def _hang(tag: str) -> str:
    RELEASE.wait(10)  # an HTTP call without a timeout
    RETURNED.append(tag)
    return tag


@job(name="tests.async_hangs_in_a_sync_step", retries=0, step_timeout="200ms")
async def async_hangs_in_a_sync_step(ctx: Any, tag: str) -> str:
    return str(await ctx.step.run("call", _hang, tag))


@job(name="tests.async_only", retries=0)
async def async_only(ctx: Any, n: int) -> int:
    """Async steps only: needs no thread but the database's."""
    return int(await ctx.step.run("double", _double, n))


async def _slow_effect(name: str, run_id: str) -> str:
    """The side effect first, then a while before the step returns."""
    await Effect.objects.acreate(name=name, run_id=run_id)
    await asyncio.sleep(0.2)
    return name


@job(name="tests.async_gathers_in_shapes", retries=3, backoff=0)
async def async_gathers_in_shapes(ctx: Any, shape: str, fail: bool) -> list[Any]:
    """A slow step with a side effect beside a sleep (or a failing step), in a gather
    of the step coroutines, in a TaskGroup (which cancels its other tasks when one
    raises), or wrapped in a coroutine of the job's own (a task whose coroutine is not
    the step's)."""
    first = ctx.step.run("boom", _boom) if fail else ctx.step.sleep("nap", "1h")

    async def slow() -> str:
        return str(await ctx.step.run("slow", _slow_effect, "slow", ctx.run_id))

    if shape == "gather":
        return list(
            await asyncio.gather(first, ctx.step.run("slow", _slow_effect, "slow", ctx.run_id))
        )
    if shape == "task-group":
        async with asyncio.TaskGroup() as group:
            group.create_task(first)
            done = group.create_task(slow())
        return [None, done.result()]
    return list(await asyncio.gather(first, slow()))


@job(name="tests.async_gathers_past_its_timeout", retries=0, timeout="300ms")
async def async_gathers_past_its_timeout(ctx: Any) -> list[Any]:
    """A sleep beside a step that takes far longer than the job's timeout."""
    return list(await asyncio.gather(ctx.step.sleep("nap", "1h"), ctx.step.run("long", _long)))


async def _long() -> str:
    await asyncio.sleep(30)
    return "late"


async def _boom() -> None:
    raise RuntimeError("boom")


@job(name="tests.async_task_group", retries=0)
async def async_task_group(ctx: Any) -> int:
    """Steps in an asyncio.TaskGroup, one of which sleeps: the group raises a
    BaseExceptionGroup holding the Suspension."""
    async with asyncio.TaskGroup() as group:
        group.create_task(ctx.step.sleep("nap", "1h"))
        doubled = group.create_task(ctx.step.run("double", _double, 21))
    return int(doubled.result())


def _fails(kind: str, message: str) -> None:
    if kind == "non-retriable":
        raise NonRetriable(message)
    if kind == "retry-after":
        raise RetryAfter("5m", message)
    raise ValueError(message)


@job(name="tests.async_task_group_fails", retries=2, backoff=0)
async def async_task_group_fails(ctx: Any, kind: str) -> int:
    """A step that fails (as ``kind`` says) beside one that succeeds, in an
    asyncio.TaskGroup: the group raises an ExceptionGroup of that failure. "two": two
    plain failures of the job's own code, which fail together (neither awaits)."""

    async def fails(message: str) -> None:
        _fails("plain", message)

    async with asyncio.TaskGroup() as group:
        doubled = group.create_task(ctx.step.run("double", _double, 21))
        if kind == "two":
            group.create_task(fails("first"))
            group.create_task(fails("second"))
        else:
            group.create_task(ctx.step.run("fails", _fails, kind, "no such order"))
    return int(doubled.result())


def _never_returns() -> str:
    time.sleep(600)  # an HTTP call without a timeout, in a real worker process
    return "late"


@job(name="tests.async_step_never_returns", retries=0, step_timeout="200ms")
async def async_step_never_returns(ctx: Any) -> str:
    return str(await ctx.step.run("call", _never_returns))


@job(name="tests.async_patched", retries=0)
async def async_patched(ctx: Any, n: int) -> list[bool]:
    """``ctx.patched`` not awaited, in the worker's async lane: one answer written with
    the next step, one with no step after it (written when the job returns)."""
    await ctx.step.run("one", effect, "patched-one", ctx.run_id)
    answers = [ctx.patched("extra")]
    if answers[0]:
        await ctx.step.run("extra", effect, "patched-extra", ctx.run_id)
    answers.append(ctx.patched("last"))
    return answers


@job(name="tests.async_start_recorded", retries=0)
async def async_start_recorded(ctx: Any, seconds: float = 0.0) -> bool:
    """Whether the worker recorded this attempt's start within ``seconds`` of its
    first step."""
    return bool(await ctx.step.run("recorded", start_recorded_within, ctx.run_id, seconds))


#: ``async_concurrent``: how many of its runs execute at once in this process, and the most.
CONCURRENT = {"now": 0, "most": 0}


@job(name="tests.async_concurrent", retries=0)
async def async_concurrent(ctx: Any, seconds: float) -> None:
    """Waits ``seconds`` in a step, counting the runs of this job executing at once."""
    CONCURRENT["now"] += 1
    CONCURRENT["most"] = max(CONCURRENT["most"], CONCURRENT["now"])
    try:
        await ctx.step.run("wait", asyncio.sleep, seconds)
    finally:
        CONCURRENT["now"] -= 1
