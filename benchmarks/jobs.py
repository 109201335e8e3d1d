"""Jobs the benchmark enqueues (autodiscovered: ``benchmarks`` is an installed app)."""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any

from django_durable_jobs import Concurrency, job

#: The latency job appends (start - enqueue) seconds here; run.py sets it for the worker.
LAT_FILE_ENV = "BENCH_LAT_FILE"


@job(name="bench.noop")
def bench_noop(ctx: Any) -> None:
    return None


#: Where ``bench.counted`` records each execution (benchmarks/workers.py makes it).
EXECUTIONS_TABLE = "bench_workers_executions"


@job(name="bench.counted")
def bench_counted(ctx: Any) -> None:
    """A no-op run that records that it executed, one row per execution (not a step:
    an execution that happened twice leaves two rows), by the process that did it.

    Its commit does not wait for the disk (as the claim's does not): a commit that
    waits cost a loaded machine more than the run, and a row lost to a crash of the
    database is not what the count is for."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "SET LOCAL synchronous_commit TO off; "
            f"INSERT INTO {EXECUTIONS_TABLE} (run_id, pid) VALUES (%s, %s)",
            [ctx.run_id, os.getpid()],
        )


@job(name="bench.noop_once", retries=0)
def bench_noop_once(ctx: Any) -> None:
    """``bench.noop`` with one attempt (``retries=0``), as every ``django.tasks`` task
    has: each run is on its last attempt when it is claimed."""
    return None


def _identity(i: int) -> int:
    return i


@job(name="bench.ten_steps")
def bench_ten_steps(ctx: Any, n: int = 10) -> int:
    """``n`` trivial durable steps, each checkpointed (like shared/bench absurd_app.ten_steps)."""
    acc = 0
    for i in range(n):
        acc += ctx.step.run(f"s{i}", _identity, i)
    return acc


@job(name="bench.lat")
def bench_lat(ctx: Any, t0: float) -> None:
    """First thing: record how long after ``t0`` (the enqueue) this run started."""
    dt = time.time() - float(t0)
    with open(os.environ[LAT_FILE_ENV], "a") as f:
        f.write(f"{dt}\n")


@job(name="bench.result")
def bench_result(ctx: Any, pause_ms: int) -> float:
    """Sleep ``pause_ms`` in a step (the waiting caller is parked by then), then return
    the wall time the job returned: ``JobRun.wait`` measures from it (benchmarks/messages.py)."""
    ctx.step.run("pause", time.sleep, pause_ms / 1000)
    return time.time()


@job(name="bench.inbox")
def bench_inbox(ctx: Any) -> float:
    """Park in ``step.receive`` until ``bench.go`` is sent to this run, then record when
    the next step started (the run's result)."""
    ctx.step.receive("r", "bench.go", timeout="1h")
    return float(ctx.step.run("mark", time.time))


@job(name="bench.wake")
def bench_wake(ctx: Any, key: str) -> float:
    """Park until ``bench.go`` with ``key`` is published, then record when the next step
    started (wall time, same machine as the publisher): that is the run's result."""
    ctx.step.wait_for_event("w", "bench.go", match=key, timeout="1h")
    return float(ctx.step.run("mark", time.time))


@job(name="bench.io")
async def bench_io(ctx: Any, ms: int = 100) -> None:
    """I/O-bound work: one durable step that awaits ``ms`` milliseconds (like
    shared/bench procr_app.io), executed by the worker's async lane."""
    await ctx.step.run("io", asyncio.sleep, ms / 1000)


@job(name="bench.anoop")
async def bench_anoop(ctx: Any) -> None:
    return None


@job(name="bench.keyed", concurrency=Concurrency(1, key="key"))
def bench_keyed(ctx: Any, key: str) -> None:
    """A no-op under ``Concurrency(1, key=...)`` (benchmarks/flow.py)."""
    return None


from . import fanout_jobs  # noqa: E402,F401  (benchmarks/fanout.py)

#: The table the ten-insert jobs write to (benchmarks/atomic.py creates it).
ROWS_TABLE = "bench_atomic_row"


def _insert(run_id: str, i: int) -> int:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(f"INSERT INTO {ROWS_TABLE} (run_id, i) VALUES (%s, %s)", [run_id, i])
    return i


@job(name="bench.ten_inserts_run")
def bench_ten_inserts_run(ctx: Any) -> int:
    """Ten ``run`` steps, each inserting a row: the row and the record commit apart."""
    return sum(ctx.step.run(f"s{i}", _insert, ctx.run_id, i) for i in range(10))


@job(name="bench.ten_inserts_atomic")
def bench_ten_inserts_atomic(ctx: Any) -> int:
    """Ten ``atomic`` steps, each inserting a row: the row and the record commit together."""
    return sum(ctx.step.atomic(f"s{i}", _insert, ctx.run_id, i) for i in range(10))


@job(name="bench.park")
def bench_park(ctx: Any) -> None:
    """Sleep a month: the template of benchmarks/scale.py's parked, sleeping runs."""
    ctx.step.sleep("nap", "30d")
