"""Jobs that real worker processes run in ``tests/processes/worker/test_worker.py``.

Their side effects are rows (``Effect``, ``Execution``), never in-process counters:
the test and the workers are different processes.
"""

from __future__ import annotations

import os
import random
import time
from typing import Any, NoReturn

from django_durable_jobs import job
from django_durable_jobs.models import JobRun, RunStatus

from .models import Effect, Execution


def _effect(name: str, run_id: str) -> str:
    Effect.objects.create(name=name, run_id=run_id)
    return name


def _block_on_first_attempt(run_id: str, attempt: int, seconds: float) -> int:
    """Step C: blocks (so the test can kill the worker here) on attempt 1 only."""
    Effect.objects.create(name="C-started", run_id=run_id)
    if attempt == 1:
        time.sleep(seconds)
    Effect.objects.create(name="C-done", run_id=run_id)
    return attempt


@job(name="tests.slow_steps", retries=2, backoff=0)
def slow_steps(ctx: Any, block_seconds: float) -> list[Any]:
    a = ctx.step.run("A", _effect, "A", ctx.run_id)
    b = ctx.step.run("B", _effect, "B", ctx.run_id)
    c = ctx.step.run("C", _block_on_first_attempt, ctx.run_id, ctx.attempt, block_seconds)
    return [a, b, c]


@job(name="tests.async_slow_steps", retries=2, backoff=0)
async def async_slow_steps(ctx: Any, block_seconds: float) -> list[Any]:
    """``slow_steps`` as an ``async def`` job: its sync step functions run on the async
    lane's step threads."""
    a = await ctx.step.run("A", _effect, "A", ctx.run_id)
    b = await ctx.step.run("B", _effect, "B", ctx.run_id)
    c = await ctx.step.run("C", _block_on_first_attempt, ctx.run_id, ctx.attempt, block_seconds)
    return [a, b, c]


def _sleep(run_id: str, seconds: float) -> float:
    Effect.objects.create(name="sleeper-started", run_id=run_id)
    time.sleep(seconds)
    Effect.objects.create(name="sleeper-done", run_id=run_id)
    return seconds


@job(name="tests.sleeper", retries=0)
def sleeper(ctx: Any, seconds: float) -> float:
    return float(ctx.step.run("sleep", _sleep, ctx.run_id, seconds))


@job(name="tests.async_sleeper", retries=0)
async def async_sleeper(ctx: Any, seconds: float) -> float:
    """``sleeper`` as an ``async def`` job: its sync step function runs on one of the
    async lane's step threads."""
    return float(await ctx.step.run("sleep", _sleep, ctx.run_id, seconds))


def _work(n: int) -> int:
    time.sleep(random.uniform(0, 0.005))
    return n


@job(name="tests.logged", retries=0)
def logged(ctx: Any, n: int) -> int:
    """Logs every execution of the function (replays included) with its process and times."""
    row = Execution.objects.create(
        run_id=ctx.run_id, attempt=ctx.attempt, pid=os.getpid(), started_ns=time.time_ns()
    )
    value = int(ctx.step.run("work", _work, n))
    Execution.objects.filter(pk=row.pk).update(ended_ns=time.time_ns())
    return value


def _spin() -> NoReturn:
    while True:
        pass


@job(name="tests.spin", timeout="1s", retries=0)
def spin(ctx: Any) -> None:
    ctx.step.run("spin", _spin)


@job(name="tests.napper", retries=0)
def napper(ctx: Any, seconds: float) -> str:
    """Sleeps durably between two steps: the run is parked, not a process."""
    ctx.step.run("before", _effect, "nap-before", ctx.run_id)
    ctx.step.sleep("nap", seconds)
    return str(ctx.step.run("after", _effect, "nap-after", ctx.run_id))


@job(name="tests.once_in_a_batch", retries=0)
def once_in_a_batch(ctx: Any, gate: str) -> str:
    """One attempt. Logs each start of its function (``Execution``); the first run to
    begin while another run of its worker's batch waits in hand, not begun, creates the
    file ``gate`` and blocks there (the test kills its worker)."""
    row = Execution.objects.create(
        run_id=ctx.run_id, attempt=ctx.attempt, pid=os.getpid(), started_ns=time.time_ns()
    )
    if not os.path.exists(gate) and _waiting_beside(ctx.run_id) and _first(gate):
        time.sleep(120)
    Execution.objects.filter(pk=row.pk).update(ended_ns=time.time_ns())
    return str(ctx.run_id)


def _waiting_beside(run_id: str) -> set[str]:
    """The runs claimed with ``run_id`` (its lease owner's) whose function never began."""
    owner = JobRun.objects.values_list("lease_owner", flat=True).get(pk=run_id)
    batch = JobRun.objects.filter(lease_owner=owner, status=RunStatus.RUNNING)
    ids = {str(pk) for pk in batch.values_list("pk", flat=True)} - {run_id}
    return ids - set(Execution.objects.filter(run_id__in=ids).values_list("run_id", flat=True))


def _first(path: str) -> bool:
    """Whether this call created the file ``path`` (only one ever does)."""
    try:
        os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        return False
    return True
