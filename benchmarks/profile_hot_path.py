"""Profile the per-run Python work of the worker's hot path (claim, execute, record).

    BENCH_DB=dj_i_bench .venv/py312-dj61/bin/python benchmarks/profile_hot_path.py [N]

Executes N no-op runs and N one-step runs, sync and async, in this process and on one
connection (the async ones awaited with their database work inline, so that one
profile sees it all), under ``cProfile``; prints the functions with the most own time.
The database is the benchmark's (``benchmarks/settings.py``), dropped and recreated.
"""

from __future__ import annotations

import asyncio
import cProfile
import pstats
import sys
from datetime import timedelta
from typing import Any


def main(n: int) -> None:
    import django

    from benchmarks.run import recreate_db

    recreate_db()
    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)

    from benchmarks.jobs import bench_anoop, bench_io, bench_noop, bench_ten_steps
    from django_durable_jobs.db.claims import claim
    from django_durable_jobs.engine.async_steps import inline
    from django_durable_jobs.engine.clock import SystemClock
    from django_durable_jobs.worker.execution import arun_to_stop, execute
    from django_durable_jobs.worker.outcome import settle, write

    clock = SystemClock()

    def sync_runs(job: Any, calls: list[Any]) -> None:
        job.enqueue_many(calls)
        while runs := claim("prof", now=clock.now(), lease=timedelta(minutes=5), limit=50):
            for run in runs:
                execute(run, clock=clock, owner="prof")

    async def async_runs(job: Any, calls: list[Any]) -> None:
        job.enqueue_many(calls)
        while runs := claim("prof", now=clock.now(), lease=timedelta(minutes=5), limit=50):
            for run in runs:
                pending = await arun_to_stop(run, clock=clock, owner="prof", io=inline)
                settle(pending, write(pending, "prof"), "prof")

    profile = cProfile.Profile()
    profile.enable()
    sync_runs(bench_noop, [{}] * n)
    sync_runs(bench_ten_steps, [{}] * (n // 10))
    asyncio.run(async_runs(bench_anoop, [{}] * n))
    asyncio.run(async_runs(bench_io, [{"ms": 0}] * n))
    profile.disable()
    stats = pstats.Stats(profile, stream=sys.stdout)
    stats.sort_stats("tottime").print_stats(25)
    print("Our own functions, by cumulative time (the database included):")
    stats.sort_stats("cumtime").print_stats("django_durable_jobs", 30)


if __name__ == "__main__":
    import os
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "benchmarks.settings")
    # One thread for the whole profile: the ORM is called from the event loop on purpose.
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "1"
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 2000)
