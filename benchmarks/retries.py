"""A no-op without retries beside the same with retries, alone: 1 worker, plain project.

    BENCH_DB=bench_retries .venv/py312-dj61/bin/python benchmarks/retries.py [--rounds 3] [-n 5000]

Each round processes ``n`` runs of ``bench.noop`` (the default ``RETRIES``, 3) and then
``n`` of ``bench.noop_once`` (``retries=0``, as a ``django.tasks`` task) with one
``runjobs --burst`` under a plain project's settings (``ours.PLAIN_ENV``:
``CONN_MAX_AGE=0``, no ``LOGGING``), the figures ``make bench`` prints in the plain
project's notes (``ours.no_retries``), and prints both rates and their ratio. The
database (``BENCH_DB``) is dropped and recreated.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("-n", type=int, default=5000)
    args = parser.parse_args()
    import django

    from benchmarks.db import recreate_db, truncate
    from benchmarks.harness import WORK, process, say

    WORK.mkdir(parents=True, exist_ok=True)
    recreate_db()
    django.setup()
    from django.core.management import call_command

    from benchmarks.jobs import bench_noop
    from benchmarks.ours import PLAIN_ENV, enqueue_in_one_transaction, no_retries

    call_command("migrate", verbosity=0)
    say(f"{args.rounds} rounds of {args.n} no-op runs with retries=3, then with retries=0")
    print("round | retries=3 jobs/s | retries=0 jobs/s | ratio")
    for round_ in range(1, args.rounds + 1):
        enqueue_in_one_transaction(args.n, bench_noop)
        with_retries = process([], args.n, "noop_1_retries_3", PLAIN_ENV).rate
        truncate()
        once = no_retries(args.n, with_retries)
        print(
            f"{round_:5d} | {with_retries:16,.0f} | {once.rate:16,.0f} "
            f"| {once.rate / with_retries:5.2f}",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "benchmarks.settings")
    sys.exit(main())
