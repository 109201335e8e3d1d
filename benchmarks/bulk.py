#!/usr/bin/env python
"""What a bulk retry costs the workers: the claim rate of a running ``runjobs`` while
100,000 failed runs are retried by filter, beside its rate without.

    BENCH_DB=bench_me .venv/py312-dj61/bin/python benchmarks/bulk.py [--runs 100000]
    BENCH_ENGINE=sqlite .venv/py312-dj61/bin/python benchmarks/bulk.py --runs 20000

The database is dropped and recreated. It gets ``--runs`` failed runs of ``bench.noop``
on the queue ``bulk`` (written with ``bulk_create``, as a provider outage leaves them)
and a backlog of ``--backlog`` queued no-op runs on the queue ``default``. One
``runjobs --queue default`` worker (not ``--burst``) works through the backlog; the
retried runs land on ``bulk``, which it does not serve, so its rate is the no-op claim
rate alone. Phases, each timed from the runs' ``finished_at`` in the database:

- before: ``--window`` seconds of the worker alone;
- during: ``bulk.apply("retry", ...)`` of every failed run of queue ``bulk``, as
  ``manage.py jobs retry --queue bulk --status failed`` does it (batches of
  ``--batch-size``), in this process;
- after: ``--window`` seconds more (the retried runs are queued now, on ``bulk``).

Printed: the no-op runs/s of each phase, the bulk retry's runs/s and its batches.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import uuid
from datetime import datetime
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))
os.environ["DJANGO_SETTINGS_MODULE"] = "benchmarks.settings"

from benchmarks.db import recreate_db  # noqa: E402 - needs the path above
from benchmarks.harness import WORK, log_problems, say, start_worker, stop_worker  # noqa: E402


def failed_runs(n: int) -> None:
    """``n`` failed no-op runs on the queue ``bulk``, as an outage leaves them."""
    from django.utils import timezone

    from django_durable_jobs.models import JobRun, RunStatus

    now = timezone.now()
    for start in range(0, n, 5000):
        JobRun.objects.bulk_create(
            JobRun(
                id=uuid.uuid4(),
                job_name="bench.noop",
                queue="bulk",
                status=RunStatus.FAILED,
                attempt=3,
                created_at=now,
                wake_at=now,
                started_at=now,
                finished_at=now,
                error_code="X_PROVIDER_DOWN",
                error="the provider is down",
                args=[],
                kwargs={},
            )
            for _ in range(min(5000, n - start))
        )


def finished_between(start: datetime, end: datetime) -> int:
    """No-op runs the worker finished in ``[start, end)``."""
    from django_durable_jobs.models import JobRun

    return JobRun.objects.filter(
        queue="default", status="succeeded", finished_at__gte=start, finished_at__lt=end
    ).count()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=100_000, help="Failed runs retried.")
    parser.add_argument("--backlog", type=int, default=200_000, help="No-op runs queued.")
    parser.add_argument("--window", type=float, default=10.0, help="Seconds before/after.")
    parser.add_argument("--batch-size", type=int, default=500)
    args = parser.parse_args(argv)
    import django

    django.setup()
    from django.core.management import call_command
    from django.db import connection

    from benchmarks.internals import bulk, database_now
    from benchmarks.jobs import bench_noop
    from django_durable_jobs.models import JobRun

    say(f"bulk: recreating the {connection.vendor} database, migrate")
    recreate_db()
    call_command("migrate", verbosity=0)
    say(f"bulk: {args.runs} failed runs, a backlog of {args.backlog} no-op runs")
    failed_runs(args.runs)
    for start in range(0, args.backlog, 10_000):
        bench_noop.enqueue_many([()] * min(10_000, args.backlog - start))
    if connection.vendor == "postgresql":
        # As autovacuum would have: the planner knows the table holds 100,000 failed runs.
        with connection.cursor() as cursor:
            cursor.execute(f"ANALYZE {JobRun._meta.db_table}")
    WORK.mkdir(parents=True, exist_ok=True)
    log = WORK / "worker_bulk.log"
    worker = start_worker(["--queue", "default"], log)
    try:
        time.sleep(3)  # started, connected, claiming
        t0 = database_now()
        time.sleep(args.window)
        t1 = database_now()
        say(f"bulk: retrying {args.runs} runs in batches of {args.batch_size}")
        selected = bulk.run_filter(queue="bulk", statuses=["failed"]).runs(t1)
        started = time.perf_counter()
        done = bulk.apply("retry", selected, batch_size=args.batch_size)
        took = time.perf_counter() - started
        t2 = database_now()
        time.sleep(args.window)
        t3 = database_now()
    finally:
        stop_worker(worker)
    if not JobRun.objects.filter(queue="default", status="queued").exists():
        say("bulk: the backlog ran out before the end (raise --backlog): rates are low")
    if done.done != args.runs:
        raise RuntimeError(f"retried {done.done} of {args.runs} runs")
    rates = [
        (label, finished_between(a, b) / (b - a).total_seconds())
        for label, a, b in (("before", t0, t1), ("during", t1, t2), ("after", t2, t3))
    ]
    print(f"database: {connection.vendor}; worker: runjobs --queue default (1 process)")
    print(
        f"bulk retry: {done.done} runs in {took:.1f} s ({done.done / took:.0f} runs/s), "
        f"{done.batches} batches of {args.batch_size}"
    )
    for label, rate in rates:
        print(f"no-op runs/s {label:<7} {rate:8.0f}")
    print(f"during / before: {rates[1][1] / rates[0][1]:.2f}")
    for line in log_problems(log)[:5]:
        print(f"worker: {line}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
