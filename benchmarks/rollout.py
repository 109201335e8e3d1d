#!/usr/bin/env python
"""What the claim's filter of a rolling deploy costs, on this machine's PostgreSQL.

    BENCH_DB=bench_me .venv/py312-dj61/bin/python benchmarks/rollout.py [--batches 8]

A worker filters its claim by the (job, version) pairs it registers only while workers
with other code are about (``worker/rollout.py``); otherwise the claim is the usual
statement. The claim of runs under no limit (the prepared statement a busy worker sends
per run) is timed in one process: batches of 500 claims alternate between the two, and
the best batch of each is kept (the machine's noise only ever adds):

- an empty claim (nothing runnable: an idle worker's poll, a woken worker too late);
- the claim of one run (a backlog of this worker's own no-op runs);
- the filtered claim of one run behind 5,000 runs of a job this worker lacks, due
  first (a new job's backlog that only the new deploy's workers take).

The database named by BENCH_DB is dropped and recreated.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
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

BATCH = 500
LEASE = timedelta(seconds=60)


def best(batches: int, **modes: Callable[[], Any]) -> dict[str, float]:
    """Microseconds per call of each mode: the best of ``batches`` batches, alternated."""
    found: dict[str, float] = dict.fromkeys(modes, float("inf"))
    for _ in range(batches):
        for mode, call in modes.items():
            started = time.perf_counter()
            for _ in range(BATCH):
                call()
            found[mode] = min(found[mode], (time.perf_counter() - started) / BATCH * 1e6)
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--batches", type=int, default=8)
    args = parser.parse_args(argv)
    import django

    django.setup()
    from django.core.management import call_command

    from benchmarks.internals import Executable, all_versions, claim_unlimited, database_now
    from benchmarks.jobs import bench_noop
    from django_durable_jobs.models import JobRun

    say("rollout: recreating the database, migrate")
    recreate_db()
    call_command("migrate", verbosity=0)
    mine = frozenset((job.name, job.version) for job in all_versions())

    def claims(filtered: bool) -> Callable[[], Any]:
        def one() -> Any:
            now = database_now()
            only = Executable(mine, mine | {("new.job", 1)}, now - timedelta(minutes=10))
            return claim_unlimited("bench#1", now, LEASE, None, 1, only if filtered else None)

        return one

    plain, filtered = claims(False), claims(True)
    rows = [("empty claim", best(args.batches, plain=plain, filtered=filtered))]
    bench_noop.enqueue_many([()] * (2 * BATCH * args.batches + BATCH))
    rows.append(("claim of one run", best(args.batches, plain=plain, filtered=filtered)))
    truncate()
    bench_noop.enqueue_many([()] * 5000)
    JobRun.objects.update(job_name="bench.elsewhere", priority=10)  # no worker here has it
    bench_noop.enqueue_many([()] * (BATCH * args.batches + BATCH))
    behind = best(args.batches, filtered=filtered)
    rows.append(("claim of one run behind 5,000 runs it lacks", behind))
    print(f"\nThe claim's filter, PostgreSQL, {len(mine)} pairs registered, best of batches\n")
    print(f"{'claim':<46} {'usual µs':>9} {'filtered µs':>12}")
    for name, figures in rows:
        usual = f"{figures['plain']:.0f}" if "plain" in figures else "—"
        print(f"{name:<46} {usual:>9} {figures['filtered']:>12.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
