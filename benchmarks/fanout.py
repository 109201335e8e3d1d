#!/usr/bin/env python
"""Fan-out benchmark: one ``step.invoke_all`` of N children beside N sequential
``step.invoke`` steps, each processed by 2 worker processes on PostgreSQL.

    BENCH_DB=dj_g .venv/py312-dj61/bin/python benchmarks/fanout.py [N]   # N=1000

Measured: from the parent's step starting to the parent resuming after its last
child (two ``time.time`` steps around the children, read from the run's result),
and the parent's executions (how often it was woken). The database ``BENCH_DB`` is
dropped and recreated, as by ``benchmarks/run.py``.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from benchmarks.db import recreate_db  # noqa: E402 - needs the path above
from benchmarks.harness import WORK, say, start_worker, stop_worker  # noqa: E402


def measure(job_name: str, n: int, timeout: float = 1800) -> tuple[float, int]:
    """Seconds from the step start to the parent resuming, and the parent's executions."""
    from benchmarks.internals import enqueue
    from django_durable_jobs.models import JobRun, StepRecord

    JobRun.objects.all().delete()
    parent = enqueue(job_name, n)
    WORK.mkdir(parents=True, exist_ok=True)
    workers = [start_worker([], WORK / f"fanout-{job_name}-{i}.log") for i in range(2)]
    try:
        deadline = time.monotonic() + timeout
        while not JobRun.objects.filter(pk=parent.pk, status="succeeded").exists():
            if time.monotonic() > deadline:
                raise SystemExit(f"{job_name}: the parent did not finish within {timeout}s")
            time.sleep(0.2)
    finally:
        for worker in workers:
            stop_worker(worker)
    parent.refresh_from_db()
    looks = sum(StepRecord.objects.filter(run=parent).values_list("attempts", flat=True))
    times: dict[str, float] = parent.result or {}
    return times["t1"] - times["t0"], looks


def main() -> None:
    import django

    django.setup()
    from django.core.management import call_command

    n = int(sys.argv[1]) if len(sys.argv) > 1 else 1000
    recreate_db()
    call_command("migrate", verbosity=0)
    say(f"fan-out: one invoke_all of {n} children, 2 workers")
    fan, fan_looks = measure("bench.fan.all", n)
    say(f"fan-out: {n} sequential invoke steps, 2 workers")
    seq, seq_looks = measure("bench.fan.sequential", n)
    print(f"| {n} children, 2 workers | step start -> parent resumed | parent step visits |")
    print("|---|---|---|")
    print(f"| one `invoke_all` | {fan:.2f} s | {fan_looks} |")
    print(f"| {n} sequential `invoke` | {seq:.2f} s | {seq_looks} |")
    print(f"ratio: {seq / fan:.1f}x")


if __name__ == "__main__":
    main()
