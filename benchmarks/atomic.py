"""What an atomic step costs beside a ``run`` step: ten steps that each insert a row.

    BENCH_DB=bench_atomic .venv/py312-dj61/bin/python benchmarks/atomic.py [--runs N] [--rounds R]

Each round processes ``--runs`` runs of ``bench.ten_inserts_run`` (the row and the
step's record commit apart: two commits a step) and as many of
``bench.ten_inserts_atomic`` (one transaction a step: the row, the run's row lock, the
record, one commit) with one ``runjobs --burst``, alternately, and prints steps/s and
the time an atomic step costs more (or less) than a ``run`` step. The database
(``BENCH_DB``, PostgreSQL) is dropped and recreated.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    import django

    from benchmarks.db import recreate_db, truncate
    from benchmarks.harness import WORK, process, say

    WORK.mkdir(parents=True, exist_ok=True)
    recreate_db()
    django.setup()
    from django.core.management import call_command
    from django.db import connection

    from benchmarks.jobs import ROWS_TABLE, bench_ten_inserts_atomic, bench_ten_inserts_run
    from benchmarks.ours import enqueue_in_one_transaction

    call_command("migrate", verbosity=0)
    with connection.cursor() as cursor:
        cursor.execute(f"CREATE TABLE {ROWS_TABLE} (id bigserial PRIMARY KEY, run_id text, i int)")
    print("round | run steps/s | atomic steps/s | atomic - run, per step | rows written once")
    for round_ in range(1, args.rounds + 1):
        rates = {}
        for label, job in (("run", bench_ten_inserts_run), ("atomic", bench_ten_inserts_atomic)):
            truncate()
            with connection.cursor() as cursor:
                cursor.execute(f"TRUNCATE {ROWS_TABLE}")
            say(f"round {round_}: {args.runs} runs of {job.name}")
            enqueue_in_one_transaction(args.runs, job)
            rates[label] = process([], args.runs, f"atomic_{label}_{round_}").rate * 10
            with connection.cursor() as cursor:
                cursor.execute(f"SELECT count(*), count(DISTINCT (run_id, i)) FROM {ROWS_TABLE}")
                rows, distinct = cursor.fetchone()
        extra_ms = (1 / rates["atomic"] - 1 / rates["run"]) * 1000
        print(
            f"{round_:5d} | {rates['run']:11,.0f} | {rates['atomic']:14,.0f} "
            f"| {extra_ms:+18.3f} ms | {rows == distinct == args.runs * 10}",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "benchmarks.settings")
    sys.exit(main())
