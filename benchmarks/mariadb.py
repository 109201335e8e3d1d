#!/usr/bin/env python
"""Our own figures on MariaDB (or MySQL): the MariaDB column of `make bench`.

    .venv/py312-dj61/bin/python benchmarks/mariadb.py [--quick] [--json FILE]

Drops and recreates the database ``BENCH_MYSQL_DB`` (default ``bench_durable_jobs``) on
127.0.0.1:3306 (user root; see benchmarks/settings.py), created with the server's
default character set and collation, as a user's would be. Measures, the same way as
benchmarks/run.py does on PostgreSQL: the no-op throughput of one ``runjobs --burst``
worker, the 10-step steps/s, and the event wake-up latency (here the idle worker polls:
there is no LISTEN/NOTIFY). Then the plans of the claim's two SELECTs (a shortlist read
without locks, then ``FOR UPDATE SKIP LOCKED`` by primary key: claims.lock_shortlisted)
under ``ANALYZE`` (executed, rolled back): 5 runnable runs beside many finished and
sleeping ones, behind a backlog of queued runs, and while as many sleeping runs are
due at once. Prints the report; ``--json`` also writes the figures for run.py.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from benchmarks.db import recreate_db, truncate  # noqa: E402 - needs the path above
from benchmarks.harness import WORK, pct, process, say  # noqa: E402
from benchmarks.ours import enqueue_in_one_transaction  # noqa: E402
from benchmarks.wakeup import WAKE_EVENTS, measure_wakeup, wakeup_report  # noqa: E402

#: Finished runs beside the 5 runnable ones (--quick: a tenth), sleeping runs, backlog.
FINISHED, SLEEPING, BACKLOG = 100_000, 10_000, 100_000


def measure_mariadb(quick: bool) -> dict[str, Any] | str:
    """This script in its own process, for run.py (Django is set up once per process,
    with one database engine): its figures, or why there are none."""
    say("mariadb: our figures on MariaDB (benchmarks/mariadb.py)")
    out = WORK / "mariadb.json"
    out.unlink(missing_ok=True)
    cmd = [sys.executable, str(REPO / "benchmarks" / "mariadb.py"), "--json", str(out)]
    log = WORK / "mariadb.log"
    with open(log, "w") as log_file:
        code = subprocess.call(
            [*cmd, *(["--quick"] if quick else [])], stdout=log_file, stderr=log_file, cwd=REPO
        )
    if code != 0 or not out.exists():
        tail = log.read_text(errors="replace").strip().splitlines()[-1:] or ["?"]
        return f"benchmarks/mariadb.py exited {code}: {tail[0]} (see {log})"
    figures: dict[str, Any] = json.loads(out.read_text())
    return figures


def insert_runs(count: int, status: str, wake_in: timedelta | None = None) -> None:
    from django.utils import timezone

    from django_durable_jobs.models import JobRun

    now = timezone.now()
    finished = now if status in ("succeeded", "failed", "cancelled") else None
    wake_at = None if wake_in is None else now + wake_in
    for start in range(0, count, 5000):
        JobRun.objects.bulk_create(
            JobRun(
                job_name="bench.noop",
                status=status,
                created_at=now,
                finished_at=finished,
                wake_at=wake_at,
            )
            for _ in range(min(5000, count - start))
        )


#: What each SELECT ``claims.claim`` sends is for, told by its text: the flow claim's
#: look for due runs under a limit (the benchmark registers a limited job, so it runs
#: first), the shortlist read without locks, the lock by primary key.
CLAIM_SELECTS = ("flow look", "shortlist", "lock")


def claim_statements(queues: list[str] | None) -> list[tuple[str, str]]:
    """The SELECTs ``claims.claim`` sends, each with what it is for (``CLAIM_SELECTS``),
    captured from a real call that is rolled back."""
    from django.db import connection, transaction
    from django.test.utils import CaptureQueriesContext
    from django.utils import timezone

    from benchmarks.internals import claim

    with transaction.atomic(), CaptureQueriesContext(connection) as queries:
        claim("bench-explain", now=timezone.now(), lease=timedelta(minutes=1), queues=queues)
        transaction.set_rollback(True)
    # A read of each runnable status merged (``models.best``) opens with "(SELECT".
    selects = [q["sql"] for q in queries if q["sql"].lstrip("(").startswith("SELECT")]
    return [(purpose(sql), sql) for sql in selects if purpose(sql) in CLAIM_SELECTS]


def purpose(sql: str) -> str:
    """Which of the claim's SELECTs ``sql`` is (or "" for a read of the claimed rows)."""
    if "FOR UPDATE SKIP LOCKED" in sql:
        return "lock"
    if "`concurrency_limit` IS NULL" in sql and "ORDER BY" in sql:
        return "shortlist"
    if "ORDER BY" in sql and "LIMIT" in sql:
        return "flow look"
    return ""


def analyze(sql: str) -> tuple[list[str], float]:
    """MariaDB's ANALYZE of ``sql`` (it runs: rolled back), and the median ms of 20 runs."""
    from django.db import connection, transaction

    keep = ("type", "key", "rows", "r_rows", "Extra")
    with transaction.atomic(), connection.cursor() as cursor:
        verb = "ANALYZE" if getattr(connection, "mysql_is_mariadb", False) else "EXPLAIN"
        cursor.execute(f"{verb} {sql}")
        names = [column[0] for column in cursor.description]
        plan = [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]
        timings = []
        for _ in range(20):
            started = time.perf_counter()
            cursor.execute(sql)
            cursor.fetchall()
            timings.append((time.perf_counter() - started) * 1000)
        transaction.set_rollback(True)
    lines = ["    " + "  ".join(f"{k}={row[k]}" for k in keep if k in row) for row in plan]
    return lines, statistics.median(timings)


def measure_explain(scale: int) -> list[str]:
    say("mariadb: the claim's plan with finished, sleeping and backlogged runs")
    finished, sleeping, backlog = FINISHED // scale, SLEEPING // scale, BACKLOG // scale
    truncate()
    out = [
        "The claim's SELECTs on MariaDB, captured from claims.claim: the flow claim's look "
        "for due limited runs (a job here has a limit), the shortlist (no locks), then FOR "
        "UPDATE SKIP LOCKED by primary key (ANALYZE: executed, rolled back; ms = median "
        "of 20 runs):"
    ]
    insert_runs(5, "queued", wake_in=timedelta(seconds=-1))

    def show(title: str, queues: list[str] | None) -> None:
        out.append(f"  {title} ({'queue default' if queues else 'all queues'}):")
        for name, sql in claim_statements(queues):
            lines, ms = analyze(sql)
            out.append(f"   {name}: {ms:.2f} ms")
            out.extend(lines)

    show("5 queued, nothing else", None)
    insert_runs(finished // 2, "succeeded")
    insert_runs(finished // 2, "failed")
    insert_runs(sleeping, "sleeping", wake_in=timedelta(days=3))
    show(f"5 queued beside {finished:,} finished and {sleeping:,} sleeping for 3 days", None)
    show(f"5 queued beside {finished:,} finished and {sleeping:,} sleeping for 3 days", ["default"])
    insert_runs(backlog, "queued", wake_in=timedelta(seconds=-1))
    show(f"a backlog of {backlog:,} queued runs", None)
    show(f"a backlog of {backlog:,} queued runs", ["default"])
    # Fresh rows: the backlog's, changed in place, would leave its old index entries
    # (delete-marked until InnoDB purges them) in the range of queued runs.
    truncate()
    insert_runs(5, "queued", wake_in=timedelta(seconds=-1))
    insert_runs(backlog, "sleeping", wake_in=timedelta(seconds=-2))
    show(f"{backlog:,} sleeping runs due at once", None)
    truncate()
    return out


def measure(n: int, nb: int, events: int, scale: int) -> dict[str, Any]:
    from django.core.management import call_command
    from django.db import connection

    from benchmarks.jobs import bench_noop, bench_ten_steps

    say(f"mariadb: recreating the database, migrate (N={n}, NB={nb})")
    recreate_db()
    call_command("migrate", verbosity=0)
    with connection.cursor() as cursor:
        cursor.execute("SELECT VERSION()")
        server = cursor.fetchone()[0]
    say(f"mariadb: {n} no-op runs, 1 worker (runjobs --burst)")
    enqueue_in_one_transaction(n, bench_noop)
    noop = process([], n, "mariadb_noop_1")
    truncate()
    say(f"mariadb: {n} no-op runs, 2 workers (runjobs --burst --concurrency 2)")
    enqueue_in_one_transaction(n, bench_noop)
    noop2 = process(["--concurrency", "2"], n, "mariadb_noop_2")
    truncate()
    say(f"mariadb: {nb} runs of bench.ten_steps, 1 worker")
    enqueue_in_one_transaction(nb, bench_ten_steps)
    steps = process([], nb, "mariadb_ten_steps_1")
    truncate()
    wakeup = measure_wakeup(events)
    return {
        "server": server,
        "w1": noop.rate,
        "w2": noop2.rate,
        "steps": steps.rate * 10,
        "wake_p50": pct(wakeup.latency_ms, 50),
        "wake_p99": pct(wakeup.latency_ms, 99),
        "wake_mode": wakeup.mode,
        "wake_report": wakeup_report(wakeup),
        "explain": measure_explain(scale),
        "problems": noop.problems + noop2.problems + steps.problems + wakeup.problems,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="N=1000, NB=100, 50 events")
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    args = parser.parse_args(argv)
    n = 1000 if args.quick else int(os.environ.get("N", "5000"))
    nb = 100 if args.quick else int(os.environ.get("NB", "500"))
    events = 50 if args.quick else WAKE_EVENTS
    WORK.mkdir(parents=True, exist_ok=True)

    import django

    django.setup()
    figures = measure(n, nb, events, scale=10 if args.quick else 1)
    print(f"MariaDB {figures['server']}: N={n}, NB={nb}, {events} events")
    print(
        f"  1 worker jobs/s {figures['w1']:,.0f}; 2 workers jobs/s {figures['w2']:,.0f}; "
        f"10-step steps/s {figures['steps']:,.0f}"
    )
    print("\n".join(figures["wake_report"]))
    print("\n".join(figures["explain"]))
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2))
    return 0


if __name__ == "__main__":
    os.environ["BENCH_ENGINE"] = "mysql"  # before Django reads benchmarks.settings
    os.environ["DJANGO_SETTINGS_MODULE"] = "benchmarks.settings"
    sys.exit(main())
