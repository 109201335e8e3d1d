#!/usr/bin/env python
"""Enqueue rates alone, ours beside pgqueuer's, measured back to back in one window.

    .venv/py312-dj61/bin/python benchmarks/enqueue.py [--rounds 3] [--pgqueuer]
    BENCH_ENGINE=mysql  .venv/py312-dj61/bin/python benchmarks/enqueue.py
    BENCH_ENGINE=sqlite .venv/py312-dj61/bin/python benchmarks/enqueue.py

Each round: ``N`` (default 5000) ``bench_noop.enqueue()`` calls one by one, each
committed on its own (autocommit), then one ``bench_noop.enqueue_many()`` of ``N``
calls: the same as the table's "enqueue" and "bulk" columns (benchmarks/ours.py).
With ``--pgqueuer`` (PostgreSQL), then pgqueuer's, as /work/shared/bench/bench_pgqueuer.py
measures it: ``N`` ``Queries.enqueue`` one by one (asyncpg, each its own transaction), and
lists of 1000 (each its own transaction), in its virtualenv ($PEERBENCH_DIR/pgq, made by
shared/bench/setup.sh pgq). Prints each round and the medians; the database is
``BENCH_DB`` (recreated), pgqueuer's ``pgq_<BENCH_DB>`` (recreated: not ``peer_pgq``,
which ``make bench`` may be using meanwhile).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "benchmarks.settings")

from benchmarks.db import recreate_db, truncate  # noqa: E402 - needs the path above
from benchmarks.harness import say  # noqa: E402
from benchmarks.peers import PEER_DIR, PEER_SCRIPTS  # noqa: E402

#: pgqueuer's database, beside ours.
PGQ_DB = "pgq_" + os.environ.get("BENCH_DB", "bench_durable_jobs")
#: pgqueuer's enqueue, the lines of bench_pgqueuer.py's ``_enqueue`` (that script runs
#: its whole workload on import), printing one-by-one and bulk rates as JSON.
PGQUEUER = """
import asyncio, json, sys, time
sys.path.insert(0, {scripts!r})
import asyncpg, common
from pgqueuer import Queries
from pgqueuer.db import AsyncpgDriver

async def _enqueue(n, bulk):
    conn = await asyncpg.connect(common.dsn({db!r}))
    q = Queries(AsyncpgDriver(conn))
    t = time.perf_counter()
    if bulk:
        for i in range(0, n, 1000):
            k = min(1000, n - i)
            await q.enqueue(["noop"] * k, [None] * k, [0] * k)
    else:
        for _ in range(n):
            await q.enqueue("noop", None)
    rate = n / (time.perf_counter() - t)
    await conn.close()
    return rate

one = asyncio.run(_enqueue({n}, False))
common.psql({db!r}, "truncate pgqueuer, pgqueuer_log, pgqueuer_statistics")
bulk = asyncio.run(_enqueue({n}, True))
common.psql({db!r}, "truncate pgqueuer, pgqueuer_log, pgqueuer_statistics")
print(json.dumps([one, bulk]))
"""


def pgqueuer_install() -> Path:
    python = PEER_DIR / "pgq" / "bin" / "python"
    if not python.exists():
        raise SystemExit(f"no {python}: run {PEER_SCRIPTS / 'setup.sh'} pgq")
    code = (
        f"import sys; sys.path.insert(0, {str(PEER_SCRIPTS)!r}); import common; "
        f"common.recreate_db({PGQ_DB!r})"
    )
    subprocess.run([str(python), "-c", code], check=True, cwd=PEER_SCRIPTS)
    pgq = python.parent / "pgq"
    dsn = f"postgresql://postgres@127.0.0.1:5432/{PGQ_DB}"
    subprocess.run([str(pgq), "--pg-dsn", dsn, "install"], check=True, capture_output=True)
    return python


def pgqueuer_round(python: Path, n: int) -> tuple[float, float]:
    code = PGQUEUER.format(scripts=str(PEER_SCRIPTS), n=n, db=PGQ_DB)
    out = subprocess.run(
        [str(python), "-c", code], check=True, capture_output=True, text=True, cwd=PEER_SCRIPTS
    )
    one, bulk = json.loads(out.stdout.strip().splitlines()[-1])
    return float(one), float(bulk)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--pgqueuer", action="store_true", help="pgqueuer's after ours")
    parser.add_argument("--no-ours", action="store_true", help="pgqueuer's only")
    parser.add_argument("--json", help="also write the rates to this file")
    args = parser.parse_args()
    n = int(os.environ.get("N", "5000"))

    import django

    django.setup()
    from django.core.management import call_command

    from benchmarks.jobs import bench_noop
    from benchmarks.ours import enqueue_many, enqueue_one_by_one

    recreate_db()
    call_command("migrate", verbosity=0)
    python = pgqueuer_install() if args.pgqueuer else None
    rates: dict[str, list[float]] = {}
    figures: dict[str, float]
    for round_ in range(args.rounds):
        figures = {}
        if not args.no_ours:
            figures["ours one by one"] = enqueue_one_by_one(n)
            truncate()
            figures["ours bulk"] = enqueue_many(n, bench_noop)
            truncate()
        if python is not None:
            figures["pgqueuer one by one"], figures["pgqueuer bulk"] = pgqueuer_round(python, n)
        for name, rate in figures.items():
            rates.setdefault(name, []).append(rate)
        say(f"round {round_ + 1}: " + ", ".join(f"{k} {v:,.0f}/s" for k, v in figures.items()))
    engine = os.environ.get("BENCH_ENGINE", "postgresql")
    print(
        f"enqueue rates, N={n}, {engine}, median of {args.rounds} (load {os.getloadavg()[0]:.1f})"
    )
    for name, values in rates.items():
        runs = ", ".join(f"{v:,.0f}" for v in values)
        print(f"  {name:22} {statistics.median(values):>9,.0f} /s   ({runs})")
    if args.json:
        Path(args.json).write_text(json.dumps(rates))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
