#!/usr/bin/env python
"""What pauses cost the claim, on this machine's PostgreSQL.

    BENCH_DB=bench_me .venv/py312-dj61/bin/python benchmarks/pauses.py [--batches 8]

A worker reads the pauses at most once per poll (``worker/pauses.py``) and filters its
claim only while something is paused (``db/paused.py``). The claim of runs under no
limit (the prepared statement a busy worker sends per run) is timed in one process:
batches of 500 claims alternate between the modes, and the best batch of each is kept
(the machine's noise only ever adds):

- usual: the claim as it was before pauses existed;
- watched: the worker's claim with nothing paused, the read of the pauses included
  (once per second of claims, the default poll);
- paused: the claim filtered by one paused queue and one paused job (not the runs').

For an empty claim (nothing runnable: an idle worker's poll), the claim of one run
(a backlog of no-op runs), and, paused only, the claim of one run behind 5,000 due
runs of the paused queue (which the filter must skip). The database named by BENCH_DB
is dropped and recreated.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))
os.environ["DJANGO_SETTINGS_MODULE"] = "benchmarks.settings"

from benchmarks.db import recreate_db, truncate  # noqa: E402 - needs the path above
from benchmarks.harness import say  # noqa: E402
from benchmarks.rollout import BATCH, best  # noqa: E402

LEASE = timedelta(seconds=60)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--batches", type=int, default=8)
    args = parser.parse_args(argv)
    import django

    django.setup()
    from django.core.management import call_command

    from benchmarks.internals import Paused, PauseWatch, claim_unlimited, database_now
    from benchmarks.jobs import bench_noop
    from django_durable_jobs.models import JobRun

    say("pauses: recreating the database, migrate")
    recreate_db()
    call_command("migrate", verbosity=0)
    watch = PauseWatch(every=1.0)
    paused = Paused(queues=frozenset({"elsewhere"}), jobs=frozenset({"bench.elsewhere"}))

    def usual() -> Any:
        return claim_unlimited("bench#1", database_now(), LEASE, None, 1)

    def watched() -> Any:
        return claim_unlimited("bench#1", database_now(), LEASE, None, 1, None, watch.current())

    def filtered() -> Any:
        return claim_unlimited("bench#1", database_now(), LEASE, None, 1, None, paused)

    modes: dict[str, Callable[[], Any]] = {
        "usual": usual,
        "watched": watched,
        "paused": filtered,
    }
    rows = [("empty claim", best(args.batches, **modes))]
    bench_noop.enqueue_many([()] * (3 * BATCH * args.batches + BATCH))
    rows.append(("claim of one run", best(args.batches, **modes)))
    truncate()
    bench_noop.enqueue_many([()] * 5000)
    JobRun.objects.update(queue="elsewhere", priority=10)  # paused, and due first
    bench_noop.enqueue_many([()] * (BATCH * args.batches + BATCH))
    rows.append(("claim of one run behind 5,000 paused runs", best(args.batches, paused=filtered)))
    print("\nThe claim and the pauses, PostgreSQL, best of batches\n")
    print(f"{'claim':<44} {'usual µs':>9} {'watched µs':>11} {'paused µs':>10}")
    for name, figures in rows:
        cells = [f"{figures[m]:.0f}" if m in figures else "—" for m in modes]
        print(f"{name:<44} {cells[0]:>9} {cells[1]:>11} {cells[2]:>10}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
