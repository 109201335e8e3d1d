#!/usr/bin/env python
"""Many worker processes on one queue, straight to PostgreSQL and through PgBouncer.

    .venv/py312-dj61/bin/python benchmarks/workers.py [--database NAME] [--runs 20000] \\
        [--workers 20] [--concurrency 2] [--through direct,pgbouncer,pgbouncer+listen] [--json]

For each way through (``direct``: every connection to PostgreSQL; ``pgbouncer``: every
connection through a transaction-pooling PgBouncer that the script starts, config in a
temporary directory, ``--pool-size`` server connections; ``pgbouncer+listen``: the same,
with the workers' LISTEN on a direct connection, ``DURABLE_JOBS["LISTEN_DATABASE"]``):
``--workers`` ``runjobs --concurrency C`` processes (W x C worker processes) are started
on the queue ``bench-workers`` and left to go idle; then ``--runs`` runs of
``bench.counted`` are enqueued in one transaction, and timed from that commit to the
last finish. Each execution inserts a row into ``bench_workers_executions``: every run
must have exactly one. Reported: runs/s, the most server connections held on the
database meanwhile (``pg_stat_activity``, sampled every 0.2 s, the script's own left
out) and per worker process, PgBouncer's clients, and the problems the workers logged
(database errors, tracebacks: claim errors).

``--database`` is used as it is when it exists (a filled one, e.g. ``bench_scale_1000000``
from benchmarks/scale.py): the script adds only its own runs, on its own queue, and
deletes them, their executions table and its workers' rows afterwards, leaving the
tables as it found them. A database that does not exist is created and migrated, and
with ``--fill N`` filled as benchmarks/scale.py fills a size (benchmarks/scale_fill.py).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))
os.environ["DJANGO_SETTINGS_MODULE"] = "benchmarks.settings"

QUEUE = "bench-workers"
JOB = "bench.counted"
#: This script's runs: of its job, on its queue.
MINE = "job_name = %s AND queue = %s"
WAYS = ("direct", "pgbouncer", "pgbouncer+listen")


def parse(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    arg = parser.add_argument
    arg("--database", default=os.environ.get("BENCH_DB", "bench_workers"), help="database name")
    arg("--fill", type=int, default=0, help="finished runs to fill a new database with")
    arg("--parked", type=int, default=1_000_000, help="sleeping + waiting runs beside them")
    arg("--runs", type=int, default=20_000, help="runs per way through")
    arg("--workers", type=int, default=20, help="runjobs processes")
    arg("--concurrency", type=int, default=2, help="--concurrency of each")
    arg("--through", default=",".join(WAYS), help=f"comma-separated, of {', '.join(WAYS)}")
    arg("--pool-size", type=int, default=20, help="PgBouncer's server connections")
    arg("--timeout", type=float, default=600, help="seconds for the runs of one way")
    arg("--json", action="store_true", help="one JSON object per way, one a line")
    args = parser.parse_args(argv)
    args.ways = [way.strip() for way in args.through.split(",") if way.strip()]
    if unknown := set(args.ways) - set(WAYS):
        parser.error(f"unknown --through {', '.join(sorted(unknown))}")
    return args


def use_database(name: str, fill_size: int, parked: int) -> None:
    """Point Django (and the workers: ``BENCH_DB``) at ``name``; create, migrate and
    fill it only when it does not exist."""
    import psycopg
    from django.conf import settings
    from django.core.management import call_command

    from benchmarks.db import pg_params, recreate_db, run_sql
    from benchmarks.harness import say

    settings.DATABASES["default"]["NAME"] = name
    os.environ["BENCH_DB"] = name
    with psycopg.connect(autocommit=True, **pg_params("postgres")) as pg:
        exists = pg.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone()
    if exists:
        return
    say(f"workers: creating {name}")
    recreate_db()
    call_command("migrate", verbosity=0)
    if fill_size:
        from benchmarks.scale_fill import fill

        fill(fill_size, parked, 100_000)
        run_sql("CREATE TABLE bench_scale_filled AS SELECT true AS filled")


class Sampler(threading.Thread):
    """The most backends on the database at once, and PgBouncer's server connections
    to it, every 0.2 s, on a connection of its own; the script's are not counted."""

    def __init__(self, database: str, mine: list[int], bouncer: Any) -> None:
        super().__init__(daemon=True)
        self.database, self.mine, self.bouncer = database, mine, bouncer
        self.most = 0
        self.most_pooled = 0
        #: The most clients PgBouncer kept waiting for a server connection at once.
        self.most_waiting = 0
        self.stop = threading.Event()

    def run(self) -> None:
        import psycopg

        from benchmarks.db import pg_params

        with psycopg.connect(autocommit=True, **pg_params(self.database)) as conn:
            mine = [*self.mine, conn.info.backend_pid]
            while not self.stop.wait(0.2):
                row = conn.execute(
                    "SELECT count(*) FROM pg_stat_activity WHERE datname = %s AND pid <> ALL(%s)",
                    [self.database, mine],
                ).fetchone()
                self.most = max(self.most, int(row[0]) if row else 0)
                if self.bouncer is not None:
                    servers = self.bouncer.show("SERVERS")
                    pooled = sum(1 for server in servers if server["database"] == self.database)
                    self.most_pooled = max(self.most_pooled, pooled)
                    pools = self.bouncer.show("POOLS")
                    waiting = sum(
                        int(pool["cl_waiting"])
                        for pool in pools
                        if pool["database"] == self.database
                    )
                    self.most_waiting = max(self.most_waiting, waiting)


def prepare_table() -> bool:
    """The executions table, made if missing; True when this script made it."""
    from benchmarks.db import scalar
    from benchmarks.jobs import EXECUTIONS_TABLE

    if scalar("SELECT to_regclass(%s) IS NOT NULL", [EXECUTIONS_TABLE]):
        return False
    from benchmarks.db import run_sql

    run_sql(f"CREATE TABLE {EXECUTIONS_TABLE} (run_id uuid NOT NULL, pid int NOT NULL)")
    return True


def clean_up(made_table: bool) -> None:
    """Delete what the script added: its queue's runs, their executions, its workers."""
    from benchmarks.db import run_sql
    from benchmarks.jobs import EXECUTIONS_TABLE

    delete_runs()
    run_sql(f"DROP TABLE {EXECUTIONS_TABLE}" if made_table else f"DELETE FROM {EXECUTIONS_TABLE}")
    run_sql(
        "DELETE FROM django_durable_jobs_worker WHERE queues = %s::jsonb", [json.dumps([QUEUE])]
    )


def measure(way: str, args: argparse.Namespace, bouncer: Any) -> dict[str, Any]:
    from django.db import connection, transaction

    from benchmarks.harness import WORK, log_problems, say, start_worker, stop_worker
    from benchmarks.jobs import bench_counted

    env: dict[str, str] = {"BENCH_DB": args.database}
    if way != "direct":
        env["BENCH_PG_PORT"] = str(bouncer.port)
    if way == "pgbouncer+listen":
        env["BENCH_LISTEN_PORT"] = str(connection.settings_dict["PORT"])
    label = way.replace("+", "_")
    connection.ensure_connection()
    through = bouncer if way != "direct" else None
    sampler = Sampler(args.database, [connection.connection.info.backend_pid], through)
    sampler.start()
    say(f"workers {way}: starting {args.workers} x --concurrency {args.concurrency}")
    logs = [WORK / f"workers_{label}_{i}.log" for i in range(args.workers)]
    command = ["--queue", QUEUE, "--concurrency", str(args.concurrency)]
    procs = [start_worker(command, log, env) for log in logs]
    try:
        started_processes = _wait_started(procs, logs, args.workers * args.concurrency)
        say(f"workers {way}: enqueueing {args.runs:,} runs")
        with transaction.atomic():
            for first in range(0, args.runs, 10_000):
                bench_counted.using(queue=QUEUE).enqueue_many([()] * min(10_000, args.runs - first))
        started = time.perf_counter()
        cpu = through.cpu_seconds() if through is not None else 0.0
        done = _wait_done(args.runs, args.timeout)
        seconds = time.perf_counter() - started
        cpu = through.cpu_seconds() - cpu if through is not None else 0.0
        clients = _clients(bouncer, args.database) if through is not None else None
        exited = sum(1 for proc in procs if proc.poll() is not None)
    finally:
        for proc in procs:
            stop_worker(proc, timeout=60)
        sampler.stop.set()
        sampler.join()
    problems = [line for log in logs for line in log_problems(log)]
    errors = [line for line in problems if _is_error(line)]
    processes = args.workers * args.concurrency
    out: dict[str, Any] = {
        "way": way,
        "database": args.database,
        "workers": args.workers,
        "concurrency": args.concurrency,
        "started": started_processes,
        "exited_early": exited,
        "runs": args.runs,
        "succeeded": done,
        "runs_per_s": round(done / seconds),
        "seconds": round(seconds, 1),
        "most_server_connections": sampler.most,
        "per_worker_process": round(sampler.most / processes, 2),
        "most_through_pgbouncer": sampler.most_pooled if through is not None else None,
        "pgbouncer_clients": clients,
        "most_waiting_for_a_server": sampler.most_waiting if through is not None else None,
        "pgbouncer_cpu_s": round(cpu, 1) if through is not None else None,
        **executions(),
        "errors": len(errors),
        "error_kinds": dict(Counter(_kind(line) for line in errors).most_common(5)),
        "warning_kinds": dict(
            Counter(_kind(line) for line in problems if not _is_error(line)).most_common(5)
        ),
    }
    clean_up_runs()
    return out


def _wait_started(procs: list[Any], logs: list[Path], processes: int) -> int:
    """Until every worker process has printed its start line (it then goes idle), or
    for at most two minutes: how many did. A worker that cannot connect (too many
    clients) says so in its log, which the report counts."""
    deadline = time.monotonic() + 120
    while (started := _started(logs)) < processes:
        if time.monotonic() > deadline or all(proc.poll() is not None for proc in procs):
            break
        time.sleep(0.2)
    time.sleep(1.0)  # their first, empty claim
    return started


def _started(logs: list[Path]) -> int:
    return sum(log.read_text(errors="replace").count(" wake=") for log in logs)


def _is_error(line: str) -> bool:
    """A logged database error or traceback (a claim that failed), not a notice."""
    lowered = line.lower()
    return " ERROR " in line or "Traceback" in line or "error" in lowered or "exist" in lowered


def _wait_done(runs: int, timeout: float) -> int:
    from benchmarks.db import scalar

    deadline = time.monotonic() + timeout
    # job_name first: the index on (job_name, created_at) holds only this script's runs
    # of bench.counted, however many rows the table has.
    sql = f"SELECT count(*) FROM django_durable_jobs_jobrun WHERE {MINE} AND status = %s"
    while (done := int(scalar(sql, [JOB, QUEUE, "succeeded"]))) < runs:
        if time.monotonic() > deadline:
            break
        time.sleep(0.2)
    return done


def _clients(bouncer: Any, database: str) -> dict[str, int]:
    """PgBouncer's view while the workers still run: its clients and server connections."""
    pools = [row for row in bouncer.show("POOLS") if row.get("database") == database]
    return {
        "clients": sum(int(row["cl_active"]) + int(row["cl_waiting"]) for row in pools),
        "servers": sum(int(row["sv_active"]) + int(row["sv_idle"]) for row in pools),
    }


def executions() -> dict[str, int]:
    """The exactly-once check: runs of the queue with no execution, with more than one,
    and executions of no run of the queue."""
    from benchmarks.db import scalar
    from benchmarks.jobs import EXECUTIONS_TABLE

    counts = (
        "SELECT r.id, count(e.run_id) AS n FROM django_durable_jobs_jobrun r "
        f"LEFT JOIN {EXECUTIONS_TABLE} e ON e.run_id = r.id "
        "WHERE r.job_name = %s AND r.queue = %s GROUP BY r.id"
    )
    mine = [JOB, QUEUE]
    return {
        "executed_once": int(scalar(f"SELECT count(*) FROM ({counts}) c WHERE n = 1", mine)),
        "never_executed": int(scalar(f"SELECT count(*) FROM ({counts}) c WHERE n = 0", mine)),
        "executed_twice": int(scalar(f"SELECT count(*) FROM ({counts}) c WHERE n > 1", mine)),
    }


def clean_up_runs() -> None:
    from benchmarks.db import run_sql
    from benchmarks.jobs import EXECUTIONS_TABLE

    delete_runs()
    run_sql(f"DELETE FROM {EXECUTIONS_TABLE}")


def delete_runs() -> None:
    """This script's runs and their step records (found through the job's index)."""
    from benchmarks.db import run_sql

    mine = f"SELECT id FROM django_durable_jobs_jobrun WHERE {MINE}"
    run_sql(f"DELETE FROM django_durable_jobs_steprecord WHERE run_id IN ({mine})", [JOB, QUEUE])
    run_sql(f"DELETE FROM django_durable_jobs_jobrun WHERE id IN ({mine})", [JOB, QUEUE])


def _kind(line: str) -> str:
    """A logged problem without its times, ids and numbers: what kind it is."""
    text = line.split(" WARNING ", 1)[-1].split(" ERROR ", 1)[-1]
    return "".join("#" if ch.isdigit() else ch for ch in text)[:120]


def text(figures: dict[str, Any]) -> str:
    return (
        f"{figures['way']:<17} {figures['workers']} x {figures['concurrency']} on "
        f"{figures['database']} ({figures['started']} started, "
        f"{figures['exited_early']} exited early): {figures['runs_per_s']:>6,} runs/s "
        f"({figures['succeeded']:,} of {figures['runs']:,} in {figures['seconds']}s); "
        f"server connections at most {figures['most_server_connections']} "
        f"({figures['per_worker_process']} per worker process; through pgbouncer "
        f"{figures['most_through_pgbouncer']}, its {figures['pgbouncer_clients']}, "
        f"at most {figures['most_waiting_for_a_server']} clients waiting for one, "
        f"its CPU {figures['pgbouncer_cpu_s']} s); "
        f"executed once {figures['executed_once']:,}, twice {figures['executed_twice']}, "
        f"never {figures['never_executed']}; errors logged {figures['errors']} "
        f"{figures['error_kinds'] or ''}; warnings {figures['warning_kinds'] or '{}'}"
    )


def main(argv: Sequence[str] | None = None) -> int:
    args = parse(argv)

    import django

    django.setup()
    from django.conf import settings

    from benchmarks import pgbouncer
    from benchmarks.harness import WORK, say

    WORK.mkdir(parents=True, exist_ok=True)
    use_database(args.database, args.fill, args.parked)
    made_table = prepare_table()
    bouncer = None
    try:
        if any(way != "direct" for way in args.ways):
            db = settings.DATABASES["default"]
            bouncer = pgbouncer.start(db["HOST"], db["PORT"], args.pool_size)
            say(f"workers: pgbouncer on port {bouncer.port}, pool size {args.pool_size}")
        for way in args.ways:
            figures = measure(way, args, bouncer)
            print(json.dumps(figures) if args.json else text(figures), flush=True)
    finally:
        if bouncer is not None:
            bouncer.stop()
        clean_up(made_table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
