#!/usr/bin/env python
"""The history's upkeep at scale, on a copy of a database benchmarks/scale.py filled:
the purge of the oldest finished runs and what it costs a working worker's claim, or
the dead tuples a pass of runs through 4 workers leaves with autovacuum at work.

    .venv/py312-dj61/bin/python benchmarks/scale_history.py --template bench_scale_1000000 \\
        --db bench_scale_copy purge [--purge 1000000] [--repeat 3] [-- --batch-size 1000 ...]
    .venv/py312-dj61/bin/python benchmarks/scale_history.py --template bench_scale_1000000 \\
        --db bench_scale_copy --storage off pass [--runs 200000]

Each repeat starts from ``--db`` made anew as a copy of ``--template`` (``CREATE
DATABASE … TEMPLATE``: seconds, where a fill takes minutes), migrated, with the
tables' autovacuum settings as migrated or as ``--storage`` says. Without
``--template``, ``--db`` itself is measured, each repeat after the last (at 10M
runs a copy takes longer than the purge it is for).

``purge``: the claim probe's latencies for ``--quiet`` seconds without a purge, then
during ``manage.py jobs purge`` of the oldest ``--purge`` finished runs (what follows
``--`` is passed to it). ``pass``: ``--runs`` no-op runs through ``runjobs
--concurrency 4`` (benchmarks/scale.py ``run_through``), the runs' and step records'
tables sampled every 2 s through the pass and ``--settle`` seconds after it: their
sizes, dead tuples (the most, and at the end) and autovacuums. The cluster must run
autovacuum (``SHOW autovacuum``). One JSON object a repeat.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))
os.environ["DJANGO_SETTINGS_MODULE"] = "benchmarks.settings"


def parse(argv: Sequence[str] | None) -> tuple[argparse.Namespace, list[str]]:
    argv = list(sys.argv[1:] if argv is None else argv)
    extra: list[str] = []
    if "--" in argv:
        at = argv.index("--")
        argv, extra = argv[:at], argv[at + 1 :]
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    option = parser.add_argument
    option("--db", required=True, help="the database measured, made anew from --template")
    option(
        "--template",
        help="a database benchmarks/scale.py filled; without it --db is measured as it is "
        "(a purge deletes its oldest runs for good)",
    )
    option(
        "--storage",
        choices=("as-migrated", "on", "off"),
        default="as-migrated",
        help="the tables' autovacuum settings (db/postgresql/sql/storage.sql): set or reset",
    )
    option("--repeat", type=int, default=1)
    modes = parser.add_subparsers(dest="mode", required=True)
    purge = modes.add_parser("purge", help="the purge, and the claim's latency during it")
    purge.add_argument("--purge", type=int, default=1_000_000, help="oldest finished runs")
    purge.add_argument("--quiet", type=float, default=10.0, help="claims without a purge, s")
    through = modes.add_parser("pass", help="runs through 4 workers: the dead tuples left")
    through.add_argument("--runs", type=int, default=200_000)
    through.add_argument("--settle", type=float, default=120.0, help="sampled after, s")
    return parser.parse_args(argv), extra


def fresh(args: argparse.Namespace) -> None:
    """``--db``, a copy of ``--template`` (or as it is, without one), migrated as
    asked; Django pointed at it."""
    import psycopg
    from django.conf import settings
    from django.core.management import call_command
    from django.db import connections

    from benchmarks.db import pg_params

    connections.close_all()
    if args.template:
        with psycopg.connect(autocommit=True, **pg_params("postgres")) as pg:
            pg.execute(f'DROP DATABASE IF EXISTS "{args.db}" WITH (FORCE)')
            pg.execute(f'CREATE DATABASE "{args.db}" TEMPLATE "{args.template}"')
    settings.DATABASES["default"]["NAME"] = args.db
    os.environ["BENCH_DB"] = args.db  # the worker's and the purge's processes
    call_command("migrate", "django_durable_jobs", verbosity=0)
    if args.storage != "as-migrated":
        from django.db import connection

        from benchmarks.internals import postgresql_sql as sql

        with connection.schema_editor() as editor:
            (sql.set_storage if args.storage == "on" else sql.reset_storage)(editor)


def purge(args: argparse.Namespace, extra: list[str]) -> dict[str, Any]:
    from benchmarks import scale_probes as probe

    out: dict[str, Any] = {"purge": args.purge, "options": extra, "load": os.getloadavg()[0]}
    _, quiet = probe.during(lambda: time.sleep(args.quiet), probe.PURGE_BACKLOG)
    out["claims_without"] = len(quiet)
    out["claim_p50_without_purge_ms"], out["claim_p99_without_purge_ms"] = probe.percentiles(quiet)
    before = probe.finished_runs()
    seconds, busy = probe.during(probe.purge_oldest(args.purge, *extra), probe.PURGE_BACKLOG)
    out["purged"] = before - probe.finished_runs()
    out["purge_s"] = round(seconds, 1)
    out["claims_during"] = len(busy)
    out["claim_p50_during_purge_ms"], out["claim_p99_during_purge_ms"] = probe.percentiles(busy)
    out["load_after"] = os.getloadavg()[0]
    return out


TABLES = ("django_durable_jobs_jobrun", "django_durable_jobs_steprecord")


def sample() -> dict[str, tuple[int, int, int]]:
    """Per table: MB, dead tuples, autovacuums so far."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT relname, pg_table_size(relid) / 1048576, n_dead_tup, autovacuum_count "
            "FROM pg_stat_user_tables WHERE relname = ANY(%s)",
            [list(TABLES)],
        )
        return {name.rsplit("_", 1)[1]: (mb, dead, runs) for name, mb, dead, runs in cursor}


def through(args: argparse.Namespace) -> dict[str, Any]:
    import threading

    from benchmarks import scale_probes as probe
    from benchmarks.jobs import bench_noop

    out: dict[str, Any] = {"runs": args.runs}
    out["load"] = os.getloadavg()[0]
    out["options"] = _storage()
    first = sample()
    samples = [first]
    for start in range(0, args.runs, 10_000):
        bench_noop.using(queue="scale-pass").enqueue_many([()] * min(10_000, args.runs - start))
    stop = threading.Event()

    def watch() -> None:
        from django.db import connection

        try:
            while not stop.wait(2.0):
                samples.append(sample())
        finally:
            connection.close()

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        out["per_s"] = round(
            probe.burst("scale-pass", args.runs, 0, ["--concurrency", "4"], "pass")
        )
        out["at_end"] = sample()
        time.sleep(args.settle)
    finally:
        stop.set()
        watcher.join()
    last = sample()
    for table in first:
        out[table] = {
            "mb": [first[table][0], out["at_end"][table][0], last[table][0]],
            "dead_max": max(s[table][1] for s in samples),
            "dead_at_end": out["at_end"][table][1],
            "dead_settled": last[table][1],
            "autovacuums": last[table][2] - first[table][2],
        }
    del out["at_end"]
    out["load_after"] = os.getloadavg()[0]
    return out


def _storage() -> dict[str, Any]:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT relname, reloptions FROM pg_class WHERE relname = ANY(%s)", [list(TABLES)]
        )
        return {name.rsplit("_", 1)[1]: options for name, options in cursor}


def main(argv: Sequence[str] | None = None) -> int:
    args, extra = parse(argv)
    import django

    django.setup()
    from benchmarks.harness import WORK

    WORK.mkdir(parents=True, exist_ok=True)
    for _ in range(args.repeat):
        fresh(args)
        figures = purge(args, extra) if args.mode == "purge" else through(args)
        print(json.dumps(figures), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
