#!/usr/bin/env python
"""Our figures on SQLite, the embedded default, beside the file's own floor.

    .venv/py312-dj61/bin/python benchmarks/sqlite.py [--rounds 3] [--runs 2000]
        [--ten-step-runs 300] [--floor-commits 2000]

The database is a file (``BENCH_SQLITE_PATH``, default ``.tmp/bench/bench.sqlite3``),
recreated. Each round measures, on that file:

- the floor: commits/s of a loop of one-row ``INSERT``s in autocommit (each its own
  transaction), on a table of its own, through a connection set up as the app sets up
  its own (``Dialect.on_connect``: WAL, the busy timeout; ``synchronous`` as it leaves
  it), and the same with ``synchronous=NORMAL`` for contrast;
- the commits a run costs: ``--runs`` no-op runs and ``--ten-step-runs`` 10-step runs
  executed by one worker loop in this process (``Worker``, ``--burst``), every write
  transaction of every connection counted (the sqlite3 trace callback: a ``COMMIT``
  after a write, or a write in autocommit);
- no-op runs/s and 10-step steps/s of one ``runjobs --burst`` process (as
  ``benchmarks/run.py`` measures them on PostgreSQL: from the runs' timestamps).

Then the goal: no-op runs/s >= floor / (commits per no-op run) x ``GOAL_SHARE``.
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from benchmarks.db import recreate_db, truncate  # noqa: E402 - needs the path above
from benchmarks.harness import WORK, process, say  # noqa: E402
from benchmarks.ours import enqueue_in_one_transaction  # noqa: E402

#: The share of the floor's rate (per commit a run needs) the worker should reach: the
#: rest is Python's (the claim's and the outcome's statements, the job's frame, the
#: engine) and the reads between the commits.
GOAL_SHARE = 0.5
#: Statements that write, and so commit at once in autocommit.
WRITES = frozenset({"INSERT", "UPDATE", "DELETE", "REPLACE"})
#: ``synchronous`` levels whose commits do not wait for the disk (in WAL mode).
LAZY = frozenset({"0", "1", "OFF", "NORMAL"})


@dataclass
class Round:
    floor: float  # commits/s, the app's settings
    floor_normal: float  # commits/s, synchronous=NORMAL
    synchronous: int  # what the app's connection has (0 off, 1 normal, 2 full, 3 extra)
    noop_commits: tuple[float, float]  # per run: all, durable
    ten_step_commits: tuple[float, float]
    noop: float  # runs/s, runjobs --burst
    steps: float  # steps/s, runjobs --burst


class Commits:
    """Counts write transactions from the statements each connection sends, and those
    of them that wait for the disk (not under ``PRAGMA synchronous`` NORMAL or OFF)."""

    def __init__(self) -> None:
        self.count = self.durable = 0

    def _commit(self, lazy: bool) -> None:
        self.count += 1
        self.durable += not lazy

    def tracer(self) -> Callable[[str], None]:
        state = {"open": False, "wrote": False, "lazy": False}

        def trace(sql: str) -> None:
            text = sql.strip().upper()
            word = text.split(None, 1)[0] if text else ""
            if text.startswith("PRAGMA SYNCHRONOUS="):
                state["lazy"] = text.rsplit("=", 1)[1] in LAZY
            elif word == "BEGIN":
                state.update(open=True, wrote=False)
            elif word in ("COMMIT", "END"):
                if state["wrote"]:
                    self._commit(state["lazy"])
                state.update(open=False, wrote=False)
            elif word == "ROLLBACK" and not text.startswith("ROLLBACK TO"):
                state.update(open=False, wrote=False)
            elif word in WRITES:
                if state["open"]:
                    state["wrote"] = True
                else:
                    self._commit(state["lazy"])

        return trace

    def attach(self, sender: Any, connection: Any, **kwargs: Any) -> None:
        """``connection_created``: trace every connection this process opens."""
        connection.connection.set_trace_callback(self.tracer())


def floor(path: str, commits: int, synchronous: str | None) -> float:
    """Commits/s of one-row INSERTs in autocommit on ``path``, WAL and the busy timeout
    as ``Dialect.on_connect`` sets them (and ``synchronous`` if given)."""
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA busy_timeout=30000")
        if synchronous is not None:
            conn.execute(f"PRAGMA synchronous={synchronous}")
        conn.execute("CREATE TABLE IF NOT EXISTS bench_floor (id INTEGER PRIMARY KEY, t0 REAL)")
        started = time.perf_counter()
        for _ in range(commits):
            conn.execute("INSERT INTO bench_floor (t0) VALUES (?)", (time.time(),))
        rate = commits / (time.perf_counter() - started)
        conn.execute("DROP TABLE bench_floor")
        return rate
    finally:
        conn.close()


def app_synchronous() -> int:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("PRAGMA synchronous")
        return int(cursor.fetchone()[0])


def commits_per_run(job: Any, runs: int) -> tuple[float, float]:
    """The write transactions ``runs`` runs of ``job`` cost a worker loop in this
    process (``--burst``; the enqueue not counted), per run: all, and those that wait
    for the disk."""
    from django.db import connections
    from django.db.backends.signals import connection_created

    from benchmarks.internals import Worker, WorkerOptions

    enqueue_in_one_transaction(runs, job)
    connections.close_all()  # the worker's connections are traced from their start
    commits = Commits()
    connection_created.connect(commits.attach)
    try:
        worker = Worker(WorkerOptions(burst=True, worker_id="bench-sqlite-commits"))
        done = worker.run()
    finally:
        connection_created.disconnect(commits.attach)
    if done != runs:
        raise RuntimeError(f"the in-process worker ran {done} of {runs} runs")
    truncate()
    return commits.count / runs, commits.durable / runs


def measure_round(runs: int, ten_step_runs: int, floor_commits: int) -> Round:
    from django.conf import settings

    from benchmarks.jobs import bench_noop, bench_ten_steps

    path = str(settings.DATABASES["default"]["NAME"])
    say(f"sqlite: the floor, {floor_commits} one-row INSERTs in autocommit")
    base = floor(path, floor_commits, None)
    normal = floor(path, floor_commits, "NORMAL")
    say("sqlite: commits per run, an in-process worker loop")
    noop_commits = commits_per_run(bench_noop, max(runs // 4, 100))
    ten_commits = commits_per_run(bench_ten_steps, max(ten_step_runs // 4, 20))
    say(f"sqlite: {runs} no-op runs, 1 worker (runjobs --burst)")
    enqueue_in_one_transaction(runs, bench_noop)
    noop = process([], runs, "sqlite_noop_1")
    truncate()
    say(f"sqlite: {ten_step_runs} runs of bench.ten_steps, 1 worker")
    enqueue_in_one_transaction(ten_step_runs, bench_ten_steps)
    steps = process([], ten_step_runs, "sqlite_ten_steps_1")
    truncate()
    for problem in noop.problems + steps.problems:
        print(f"      worker: {problem}")
    return Round(
        floor=base,
        floor_normal=normal,
        synchronous=app_synchronous(),
        noop_commits=noop_commits,
        ten_step_commits=ten_commits,
        noop=noop.rate,
        steps=steps.rate * 10,
    )


def report(rounds: list[Round]) -> list[str]:
    def med(values: list[float]) -> float:
        return statistics.median(values)

    floor_rate = med([r.floor for r in rounds])
    out = [
        f"medians of {len(rounds)} rounds:",
        f"  floor {floor_rate:,.0f} commits/s (synchronous={rounds[0].synchronous}); "
        f"with synchronous=NORMAL {med([r.floor_normal for r in rounds]):,.0f}",
    ]
    for what, commits, rate, unit, per_run in (
        ("no-op run", [r.noop_commits for r in rounds], [r.noop for r in rounds], "runs/s", 1),
        (
            "10-step run",
            [r.ten_step_commits for r in rounds],
            [r.steps for r in rounds],
            "steps/s",
            10,
        ),
    ):
        every, durable = med([c[0] for c in commits]), med([c[1] for c in commits])
        got = med(rate)
        goal = floor_rate / durable * per_run * GOAL_SHARE
        out.append(
            f"  {what}: {every:.2f} commits, {durable:.2f} waiting for the disk; "
            f"{got:,.0f} {unit}; goal floor / {durable:.2f}{f' x {per_run}' if per_run > 1 else ''}"
            f" x {GOAL_SHARE} = {goal:,.0f} -> {'met' if got >= goal else 'NOT met'} "
            f"({got / goal:.2f}x)"
        )
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--runs", type=int, default=2000)
    parser.add_argument("--ten-step-runs", type=int, default=300)
    parser.add_argument("--floor-commits", type=int, default=2000)
    args = parser.parse_args(argv)
    WORK.mkdir(parents=True, exist_ok=True)
    recreate_db()
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    print(
        f"sqlite {sqlite3.sqlite_version}: {args.runs} no-op runs, {args.ten_step_runs} "
        f"10-step runs a round; load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}"
    )
    print(
        "round | floor commits/s | NORMAL | commits (durable): no-op | 10-step "
        "| no-op runs/s | steps/s"
    )
    rounds = []
    for number in range(1, args.rounds + 1):
        r = measure_round(args.runs, args.ten_step_runs, args.floor_commits)
        rounds.append(r)
        print(
            f"{number:5d} | {r.floor:15,.0f} | {r.floor_normal:6,.0f} "
            f"| {r.noop_commits[0]:10.2f} ({r.noop_commits[1]:.2f}) "
            f"| {r.ten_step_commits[0]:5.2f} ({r.ten_step_commits[1]:.2f}) "
            f"| {r.noop:12,.0f} | {r.steps:7,.0f}",
            flush=True,
        )
    print("\n".join(report(rounds)))
    print(f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    os.environ["BENCH_ENGINE"] = "sqlite"  # before Django reads benchmarks.settings
    os.environ["DJANGO_SETTINGS_MODULE"] = "benchmarks.settings"
    sys.exit(main())
