#!/usr/bin/env python
"""Benchmark django-durable-jobs against its peers on this machine's PostgreSQL.

    .venv/py312-dj61/bin/python benchmarks/run.py            # full run, with peers
    .venv/py312-dj61/bin/python benchmarks/run.py --quick    # smoke run, ours only

Prints one table (our figures beside procrastinate's, django-tasks-db's, pgqueuer's and
Absurd's, the latter measured by the scripts in shared/bench), then our figures on
MariaDB beside PostgreSQL's (benchmarks/mariadb.py), the plan of our claim query and
the database round trips per durable step. Progress goes to stderr, the report to
stdout. See benchmarks/README.md for what each column means.

This file only wires the parts: ours.py (our workloads), io_bench.py (I/O workload,
memory), wakeup.py (event wake-up latency), plan.py and trips.py (the claim's plan,
round trips), mariadb.py, peers.py (shared/bench), report.py (the table and notes).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))
os.environ["DJANGO_SETTINGS_MODULE"] = "benchmarks.settings"

from benchmarks import io_bench  # noqa: E402 - needs the path above
from benchmarks.floor import FLOOR_JOBS, measure_floor  # noqa: E402
from benchmarks.harness import WORK, say  # noqa: E402
from benchmarks.mariadb import measure_mariadb  # noqa: E402
from benchmarks.ours import LAT_JOBS, measure_ours  # noqa: E402
from benchmarks.peers import PEERS, PROCRASTINATE_IO, prepare_peers, run_peers  # noqa: E402
from benchmarks.plan import measure_explain  # noqa: E402
from benchmarks.report import Report, environment, render  # noqa: E402
from benchmarks.trips import measure_round_trips  # noqa: E402
from benchmarks.wakeup import WAKE_EVENTS, measure_wakeup  # noqa: E402


def parse(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="N=1000, NB=100, no peers")
    parser.add_argument("--no-peers", action="store_true", help="measure ours only")
    parser.add_argument(
        "--peers",
        default=",".join(p.system for p in PEERS),
        help="comma-separated peers to run (default: %(default)s)",
    )
    parser.add_argument("--no-setup", action="store_true", help="do not create missing peer venvs")
    parser.add_argument("--no-mariadb", action="store_true", help="skip the MariaDB column")
    args = parser.parse_args(argv)
    args.wanted = set() if args.quick or args.no_peers else set(args.peers.split(","))
    unknown = args.wanted - {p.system for p in PEERS}
    if unknown:
        parser.error(f"unknown peer(s) {sorted(unknown)}; known: {[p.system for p in PEERS]}")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse(argv)
    n = 1000 if args.quick else int(os.environ.get("N", "5000"))
    nb = 100 if args.quick else int(os.environ.get("NB", "500"))
    WORK.mkdir(parents=True, exist_ok=True)
    started = time.time()

    import django

    django.setup()
    from benchmarks.jobs import bench_anoop, bench_noop

    wanted = [p for p in PEERS if p.system in args.wanted]
    unable = prepare_peers(wanted, not args.no_setup)
    ours, plain, problems = measure_ours(n, nb)
    # The peers' table figures right after ours: this machine's speed moves by 20 % and
    # more between minutes, and the rest below takes ten.
    peers = run_peers(wanted, n, nb, unable)
    say(f"ours: I/O workload, {io_bench.IO_N} runs awaiting {io_bench.IO_MS} ms, 1 worker")
    io = io_bench.measure_io()
    say("ours: the I/O workload with CONN_MAX_AGE=0")
    io_default = io_bench.measure_io("io_conn_max_age_0", {"BENCH_CONN_MAX_AGE": "0"})
    problems += io.problems + io_default.problems
    rss_runs = 2000 if args.quick else io_bench.RSS_RUNS
    say(f"ours: worker RSS over {rss_runs} sync and {rss_runs} async no-op runs")
    rss = [io_bench.measure_rss(job, job.name, rss_runs) for job in (bench_noop, bench_anoop)]
    wakeup = measure_wakeup(50 if args.quick else WAKE_EVENTS)
    say(f"floor: enqueue -> start with raw psycopg, {FLOOR_JOBS} jobs (benchmarks/floor.py)")
    floor = measure_floor()
    problems += wakeup.problems
    round_trips = measure_round_trips()
    plans = measure_explain()
    header = environment(n, nb, LAT_JOBS, wakeup.events)
    mariadb = "skipped (--no-mariadb)" if args.no_mariadb else measure_mariadb(args.quick)

    report = Report(
        header=header,
        ours=ours,
        plain=plain,
        peers=peers.rows,
        extras=peers.extras,
        io=io,
        io_default=io_default,
        procrastinate_io=peers.metric("procrastinate", PROCRASTINATE_IO),
        rss=rss,
        wakeup=wakeup,
        floor_ms=floor,
        mariadb=mariadb,
        plans=plans,
        round_trips=round_trips,
        problems=problems,
    )
    print("\n".join(render(report)))
    print(f"Total time {time.time() - started:,.0f} s.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
