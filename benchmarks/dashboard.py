#!/usr/bin/env python
"""Time the dashboard's queries (``stats.collect`` and the two ``stats.series``) with
1,000,000 runs in the table, on PostgreSQL.

    BENCH_DB=mydb .venv/py312-dj61/bin/python benchmarks/dashboard.py \
        [--runs 1000000] [--repeat 5] [--over 30d]

Migrates the database named by ``BENCH_DB`` (see benchmarks/settings.py), EMPTIES its
runs table, inserts the runs in SQL (``--over`` of history, a month by default, ``1h``
for a busy hour: mostly succeeded, some failed and cancelled, a backlog of queued,
sleeping and waiting runs), VACUUM ANALYZEs, then
runs each query ``--repeat`` times and prints the median and the worst time, and the
plan's scan nodes (a ``Seq Scan`` over the runs table would not stay fast).
Not a test: figures depend on the machine; see benchmarks/README.md.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))
os.environ["DJANGO_SETTINGS_MODULE"] = "benchmarks.settings"

#: Timed passes over each query (after one warm-up pass): benchmarks/README.md's table
#: is the median and the worst of this many.
REPEAT = 5

#: Column -> SQL for one generated run; ``r`` is random() per row, ``g`` its number.
STATUS = """CASE
    WHEN r < 0.010 THEN 'queued' WHEN r < 0.012 THEN 'sleeping' WHEN r < 0.015 THEN 'waiting'
    WHEN r < 0.015016 THEN 'running' WHEN r < 0.055 THEN 'failed'
    WHEN r < 0.060 THEN 'cancelled' ELSE 'succeeded' END"""
FINISHED = "(CASE WHEN r >= 0.015016 THEN t END)"


def columns() -> dict[str, str]:
    # t: when the run finished, spread evenly over 30 days before now.
    return {
        "id": "gen_random_uuid()",
        "job_name": "'bench.job_' || (g % 20)",
        "job_version": "1",
        "queue": "(ARRAY['default','emails','reports','imports'])[1 + g % 4]",
        "priority": "0",
        "status": STATUS,
        "args": "'[]'::jsonb",
        "kwargs": "'{}'::jsonb",
        "result": "NULL",
        "error_code": "CASE WHEN r >= 0.015016 AND r < 0.055 THEN "
        "(ARRAY['X_JOB_TIMEOUT','X_CHILD_FAILED','X_NON_RETRIABLE'])[1 + g % 3] ELSE '' END",
        "error": "''",
        "error_type": "''",
        "traceback": "''",
        "attempt": "1",
        "idempotency_key": "NULL",
        "created_at": "t - interval '2 seconds'",
        "started_at": "CASE WHEN r >= 0.015 THEN t - (g % 7) * interval '1 second' END",
        "finished_at": FINISHED,
        "wake_at": "CASE WHEN r < 0.015 THEN t + (g % 3 - 1) * interval '1 hour' END",
        "lease_owner": "CASE WHEN r >= 0.015 AND r < 0.015016 THEN 'bench:1#x' ELSE '' END",
        "lease_expires_at": "NULL",
        "attempt_started_by": "''",
        "parent_id": "NULL",
        "trace_context": "NULL",
        "unreached_steps": "'[]'::jsonb",
    }


def fill(count: int, over: timedelta) -> None:
    from django.db import connection

    from benchmarks.db import run_columns
    from django_durable_jobs.models import JobRun

    names, values = run_columns(columns())
    table = JobRun._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(f"TRUNCATE {table} CASCADE")
        cursor.execute(
            f"INSERT INTO {table} ({', '.join(names)}) "
            f"SELECT {', '.join(values)} FROM ("
            f"  SELECT g, random() AS r,"
            f"         now() - (g::float / {count}) * {over.total_seconds()} * interval '1s' AS t"
            f"  FROM generate_series(1, {count}) AS g) AS gen"
        )
        cursor.execute(f"VACUUM ANALYZE {table}")


def timed(call: Callable[[], Any], repeat: int) -> tuple[float, float]:
    call()  # warm: plans and caches, as on a page that is looked at
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        call()
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times), max(times)


def scans(call: Callable[[], Any]) -> list[str]:
    """The scan nodes of each query ``call`` runs."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    with CaptureQueriesContext(connection) as captured:
        call()
    nodes = []
    with connection.cursor() as cursor:
        for query in captured.captured_queries:
            if not query["sql"].startswith("SELECT"):  # an estimate's EXPLAIN, a fold's write
                continue
            cursor.execute("EXPLAIN " + query["sql"])
            plan = "\n".join(row[0] for row in cursor.fetchall())
            nodes += re.findall(
                r"((?:Parallel )?(?:Index Only Scan|Index Scan|Bitmap Index Scan|Seq Scan)[^(]*)",
                plan,
            )
    return [n.strip() for n in nodes]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=REPEAT)
    parser.add_argument("--over", default="30d", help="the runs' history: 30d, 1h, ...")
    args = parser.parse_args(argv)

    import django

    django.setup()
    from django.core.management import call_command

    from benchmarks.internals import counters, parse_duration, rollups, stats
    from django_durable_jobs.models import RunTally

    call_command("migrate", verbosity=0)
    started = time.perf_counter()
    fill(args.runs, parse_duration(args.over))
    RunTally.objects.filter(name__in=(rollups.MINUTES.name, rollups.HOURS.name)).delete()
    print(f"inserted {args.runs:,} runs in {time.perf_counter() - started:.0f}s", file=sys.stderr)
    now = datetime.now(UTC)
    minute, hour = timedelta(minutes=1), timedelta(hours=1)
    queries: list[tuple[str, Callable[[], Any]]] = [
        ("runs_by_status", stats.runs_by_status),
        ("queue_depth", stats.queue_depth),
        ("oldest_runnable_age", lambda: stats.oldest_runnable_age(now)),
        ("throughput last minute", lambda: stats.throughput(now - minute, rollups.read(now))),
        ("throughput last hour", lambda: stats.throughput(now - hour, rollups.read(now))),
        ("durations (last hour)", lambda: stats.durations(now - hour)),
        (
            "top_errors (last day)",
            lambda: stats.top_errors(now - timedelta(days=1), rollups.read(now)),
        ),
        ("workers_alive", lambda: stats.workers_alive(now)),
        ("series per minute, 60", lambda: stats.series(now, step=minute, buckets=60)),
        ("series per hour, 24", lambda: stats.series(now, step=hour, buckets=24)),
    ]
    print(
        f"dashboard queries, {args.runs:,} runs over {args.over}, median / worst of "
        f"{args.repeat} after a warm-up that folds the rollups (ms)"
    )
    total = 0.0
    for name, call in queries:
        median, worst = timed(call, args.repeat)
        total += median
        print(f"  {name:<26} {median:8.1f} {worst:8.1f}   {'; '.join(scans(call))}")

    def page() -> None:  # as admin/dashboard.py's figures: the rollups read once
        folded = rollups.read(now)
        stats.collect(now=now, folded=folded)
        stats.series(now, step=minute, buckets=60, folded=folded)
        stats.series(now, step=hour, buckets=24, folded=folded)

    page_ms, worst = timed(page, args.repeat)
    print(f"  {'all 14, as the page':<26} {page_ms:8.1f} {worst:8.1f}")

    def fold(window: timedelta) -> Callable[[], Any]:
        """A metrics scrape that folds ``window`` of finished runs into the counters
        (a scrape every 15 s folds 15 s; one after a day without scrapes, a day)."""

        def scrape() -> Any:
            start = now - counters.FOLD_DELAY - window
            RunTally.objects.update_or_create(
                name=counters.NAME, defaults={"since": start, "folded_until": start, "tallies": {}}
            )
            return counters.counters(now)

        return scrape

    print(f"metrics counters' fold, median / worst of {args.repeat} (ms)")
    for name, window in (("15 seconds", timedelta(seconds=15)), ("a day", timedelta(days=1))):
        median, worst = timed(fold(window), args.repeat)
        print(f"  {'fold ' + name:<26} {median:8.1f} {worst:8.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
