"""The two latencies of an idle worker, alone: enqueue -> start, event commit -> next step.

    BENCH_DB=bench_latency .venv/py312-dj61/bin/python benchmarks/latency.py [--rounds 3]

Each round runs the probes of ``make bench`` (``ours.measure_latency``: ``LAT_JOBS``
runs; ``wakeup.measure_wakeup``: ``WAKE_EVENTS`` events) against a fresh ``runjobs``,
and this machine's floor (``floor.measure_floor``: the start probe with raw psycopg,
no framework), and prints their percentiles, so that a change to either path can be measured in a
minute, several times, without the peers. The database (``BENCH_DB``) is dropped and
recreated. The goals: enqueue -> start p50 <= 3 ms; commit -> next step
p50 <= 5 ms and p99 <= 20 ms.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    import django

    from benchmarks.db import recreate_db
    from benchmarks.harness import WORK, pct, say

    WORK.mkdir(parents=True, exist_ok=True)
    recreate_db()
    django.setup()
    from django.core.management import call_command

    from benchmarks.floor import measure_floor
    from benchmarks.ours import LAT_JOBS, measure_latency
    from benchmarks.wakeup import WAKE_EVENTS, measure_wakeup

    call_command("migrate", verbosity=0)
    say(f"{args.rounds} rounds of {LAT_JOBS} enqueues and {WAKE_EVENTS} events")
    print(
        "round | enqueue->start p50 | floor p50 | event commit->next step p50 | p99 "
        "| of it: wait step done"
    )
    for round_ in range(1, args.rounds + 1):
        start, _, _ = measure_latency(LAT_JOBS)
        floor = measure_floor()
        woken = measure_wakeup(WAKE_EVENTS)
        print(
            f"{round_:5d} | {start:15.2f} ms | {floor:6.2f} ms "
            f"| {pct(woken.latency_ms, 50):24.2f} ms "
            f"| {pct(woken.latency_ms, 99):6.2f} | {pct(woken.claimed_ms, 50):6.2f} ms",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "benchmarks.settings")
    sys.exit(main())
