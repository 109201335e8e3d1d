#!/usr/bin/env python
"""What flow control costs the claim, on this machine's PostgreSQL.

    BENCH_DB=dj_h .venv/py312-dj61/bin/python benchmarks/flow.py [--n 10000]

Three no-op workloads, each processed by one ``runjobs --burst`` worker, in one run:

- unlimited: N runs of ``bench.noop``;
- N distinct keys: N runs of ``bench.keyed`` (``Concurrency(1, key="key")``), each with
  its own key, so every run is claimed through ``flow.claim_limited``;
- saturated key: N runs of ``bench.keyed`` on one key whose slot is held by a run
  that never finishes, plus N/2 ``bench.noop`` runs: the free runs' rate, which the
  backlog must not slow down.

Then the plans (``EXPLAIN ANALYZE``) of the queries the claim runs with limits on,
over the saturated backlog. The database named by BENCH_DB is dropped and recreated.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))
os.environ["DJANGO_SETTINGS_MODULE"] = "benchmarks.settings"

from benchmarks.db import recreate_db  # noqa: E402 - needs the path above
from benchmarks.harness import WORK, process, say, start_worker  # noqa: E402


def enqueue(job: Any, calls: list[Any]) -> float:
    started = time.perf_counter()
    job.enqueue_many(calls)
    return len(calls) / (time.perf_counter() - started)


def rate_of(job_name: str) -> tuple[float, int]:
    from django.db.models import Count, Max, Min

    from django_durable_jobs.models import JobRun

    agg = JobRun.objects.filter(job_name=job_name, status="succeeded").aggregate(
        first=Min("started_at"), last=Max("finished_at"), done=Count("id")
    )
    seconds = (agg["last"] - agg["first"]).total_seconds()
    return agg["done"] / seconds, agg["done"]


def clear() -> None:
    from django.db import connection

    from django_durable_jobs.models import CancelKey, FlowKey, JobRun, StepRecord

    tables = ", ".join(m._meta.db_table for m in (StepRecord, CancelKey, FlowKey, JobRun))
    with connection.cursor() as cursor:
        cursor.execute(f"TRUNCATE {tables} CASCADE")


def saturate(n: int) -> None:
    """``n`` runs on key "hot", whose only slot a run holds for a day."""
    from django.utils import timezone

    from benchmarks.jobs import bench_keyed
    from django_durable_jobs.models import JobRun

    holder = bench_keyed.enqueue("hot")
    JobRun.objects.filter(pk=holder.pk).update(
        status="running",
        attempt=1,
        started_at=timezone.now(),
        lease_owner="bench-holder",
        lease_expires_at=timezone.now() + timedelta(days=1),
    )
    enqueue(bench_keyed, [("hot",)] * n)


def burst_until_idle(label: str) -> None:
    log = WORK / f"worker_{label}.log"
    proc = start_worker(["--burst"], log)
    if proc.wait(timeout=3600) != 0:
        raise RuntimeError(f"{label}: runjobs failed; see {log}")


def explain(n: int) -> list[str]:
    from django.utils import timezone

    from django_durable_jobs.models import LIMITED, JobRun

    now = timezone.now()
    runs = JobRun.objects.all()
    plans = []
    queries = {
        "flow candidates (runnable runs under a limit, best first)": runs.runnable(now)
        .filter(LIMITED)
        .only("id")[:8],
        "unlimited claim's candidates (the CTE's picked, without FOR UPDATE)": runs.runnable(now)
        .filter(concurrency_limit__isnull=True, throttle_limit__isnull=True)
        .only("id")[:1],
        "a key's slots (counted under its lock)": runs.filter(
            job_name="bench.keyed", concurrency_key="hot", status="running"
        ),
        "the oldest held run of a key (let go when a slot frees)": runs.filter(
            job_name="bench.keyed",
            concurrency_key="hot",
            status__in=("queued", "sleeping", "waiting"),
            wake_at__isnull=True,
            concurrency_limit__isnull=False,
        )
        .order_by("created_at")
        .only("id")[:1],
    }
    for title, query in queries.items():
        plans += ["", f"-- {title}", query.explain(analyze=True)]
    return plans


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--n", type=int, default=10_000)
    parser.add_argument(
        "--skip-keys", action="store_true", help="skip the N-distinct-keys workload (slowest)"
    )
    args = parser.parse_args(argv)
    n = args.n
    WORK.mkdir(parents=True, exist_ok=True)
    import django

    django.setup()
    from django.core.management import call_command

    from benchmarks.jobs import bench_keyed, bench_noop

    say(f"flow: recreating the database, migrate (N={n})")
    recreate_db()
    call_command("migrate", verbosity=0)
    rows: list[tuple[str, float, float]] = []

    say("flow: unlimited no-ops")
    put = enqueue(bench_noop, [()] * n)
    unlimited = process([], n, "flow_unlimited").rate
    rows.append(("unlimited no-op", put, unlimited))
    clear()

    if not args.skip_keys:
        say("flow: Concurrency(1, key) over N distinct keys")
        put = enqueue(bench_keyed, [(f"k{i}",) for i in range(n)])
        rate = process([], n, "flow_keys").rate
        rows.append((f"Concurrency(1, key), {n:,} distinct keys", put, rate))
        clear()

    say("flow: one saturated key with N queued runs, plus N/2 free runs")
    saturate(n)
    put = enqueue(bench_noop, [()] * (n // 2))
    burst_until_idle("flow_saturated")
    free_rate, done = rate_of("bench.noop")
    if done != n // 2:
        raise RuntimeError(f"only {done} of {n // 2} free runs ran")
    rows.append((f"{n // 2:,} free runs beside {n:,} held on one key", put, free_rate))
    plans = explain(n)

    print(f"\nFlow-control benchmark, PostgreSQL, 1 worker (runjobs --burst), N={n:,}\n")
    print(f"{'workload':<52} {'enqueue_many /s':>16} {'runs/s':>9} {'vs unlimited':>13}")
    for name, put, rate in rows:
        print(f"{name:<52} {put:>16,.0f} {rate:>9,.0f} {rate / unlimited:>12.0%}")
    print("\nPlans with limits on (over the saturated backlog):")
    print("\n".join(plans))
    return 0


if __name__ == "__main__":
    sys.exit(main())
