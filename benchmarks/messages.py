"""Results and messages, beside the event wake-up, in one window on an idle worker:

    BENCH_DB=bench_h7 .venv/py312-dj61/bin/python benchmarks/messages.py [--rounds 100]

- ``run.wait()`` latency from the run's finish: a ``bench.result`` run sleeps 50-250 ms
  in a step (the caller is parked in ``wait`` by then) and returns ``time.time()``;
  latency = the moment ``wait`` returned - that value (the outcome's write and commit
  included). Twice: woken by NOTIFY (PostgreSQL through psycopg 3: one LISTEN
  connection for the process), and polling (the ORM dialect, as on SQLite and MariaDB).
- ``send`` -> the receiving step: a ``bench.inbox`` run parks in ``step.receive``; at a
  random 50-250 ms after it parked, ``send`` in its own ``transaction.atomic()``;
  t0 = the first ``on_commit`` callback (right after COMMIT); latency = the wall time
  of its next step (``ctx.step.run("mark", time.time)``) - t0.
- the event wake-up (``benchmarks/wakeup.py``: ``publish_event`` commit -> next step),
  the same way, for comparison.

The database (``BENCH_DB``, default bench_durable_jobs) is dropped and recreated.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import time
from pathlib import Path


def measure_wait(rounds: int, *, listen: bool) -> list[float]:
    """``rounds`` waits on fresh runs: ms from the job's return to ``wait`` returning."""
    from django.db import connection

    from benchmarks.internals import polling_waits
    from benchmarks.jobs import bench_result

    latencies: list[float] = []
    for _ in range(rounds):
        run = bench_result.enqueue(random.randint(50, 250))
        if listen:
            returned_at = run.wait(timeout="30s")
        else:
            with polling_waits(connection.alias):
                returned_at = run.wait(timeout="30s")
        latencies.append((time.time() - float(returned_at)) * 1000)
    return latencies


def measure_send(rounds: int) -> list[float]:
    """``rounds`` messages, each to a run parked in ``receive``: ms from the send's
    commit to the receiving run's next step."""
    from django.db import transaction

    from benchmarks.jobs import bench_inbox
    from benchmarks.wakeup import wait_status
    from django_durable_jobs import send

    latencies: list[float] = []
    commits: list[float] = []
    for i in range(rounds):
        run = bench_inbox.enqueue()
        wait_status(run.pk, "waiting", 30, Path("worker log"))
        time.sleep(random.uniform(0.05, 0.25))  # the worker is idle again
        with transaction.atomic():
            # Registered before send's own on_commit (the wake-up pass after the commit),
            # so it runs first: t0 is the moment COMMIT returned.
            transaction.on_commit(lambda: commits.append(time.time()))
            send(run.pk, "bench.go")
        done = wait_status(run.pk, "succeeded", 30, Path("worker log"))
        latencies.append((float(done.result) - commits[i]) * 1000)
    return latencies


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--rounds", type=int, default=100)
    args = parser.parse_args()
    import django

    from benchmarks.db import recreate_db
    from benchmarks.harness import WORK, pct, say, start_idle_worker, stop_worker, wake_mode

    WORK.mkdir(parents=True, exist_ok=True)
    recreate_db()
    django.setup()
    from django.core.management import call_command

    from benchmarks.db import truncate
    from benchmarks.internals import stop_listeners
    from benchmarks.wakeup import measure_wakeup

    call_command("migrate", verbosity=0)
    log = WORK / "worker_messages.log"
    worker = start_idle_worker(log, "messages")
    rows: list[tuple[str, list[float]]] = []
    try:
        say(f"wait(), woken by NOTIFY: {args.rounds} runs")
        rows.append(
            ("run finishes -> wait() returns (NOTIFY)", measure_wait(args.rounds, listen=True))
        )
        say(f"wait(), polling: {args.rounds} runs")
        rows.append(
            ("run finishes -> wait() returns (polling)", measure_wait(args.rounds, listen=False))
        )
        say(f"send -> receiving step: {args.rounds} messages")
        rows.append(("send commit -> receiving run's next step", measure_send(args.rounds)))
        mode = wake_mode(log)
    finally:
        stop_worker(worker)
        stop_listeners()
    truncate()
    events = measure_wakeup(args.rounds)
    rows.append(("event commit -> waiting run's next step", events.latency_ms))
    width = max(len(title) for title, _ in rows)
    print(f"Results and messages, {args.rounds} each, one idle `runjobs` (wake={mode}), one window")
    print(f"  {'ms':{width}s} |    p50 |    p99 |    max")
    print(f"  {'-' * width}-+--------+--------+-------")
    for title, values in rows:
        print(
            f"  {title:{width}s} | {pct(values, 50):6.1f} | {pct(values, 99):6.1f} "
            f"| {max(values):6.1f}"
        )
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "benchmarks.settings")
    sys.exit(main())
