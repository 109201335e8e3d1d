"""Fill the jobs tables to a size, fast, for benchmarks/scale.py: SQL, not the API.

Each kind of row is cloned from a template made the real way: a run of each kind is
enqueued and taken by a real ``runjobs`` to the state wanted (a finished five-step
run, a run sleeping a month, a run waiting for an event), then its row and its step
records are copied ``n`` times with ``INSERT … SELECT … FROM generate_series``,
overriding the columns that must differ (ids, times, status, keys). A column added to
the models is copied from the template: the fill follows the schema by itself.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass

from benchmarks.db import run_sql, scalar
from benchmarks.harness import WORK, say, start_worker, stop_worker

#: Rows per INSERT (a run table chunk and its step records): progress, and no
#: transaction that holds gigabytes of WAL.
CHUNK = 500_000
#: How far back the finished runs' ``finished_at`` is spread (evenly).
HISTORY_DAYS = 30
#: A failed run in this many finished ones (the rest succeeded).
FAILED_EVERY = 20


@dataclass(frozen=True)
class Templates:
    finished: str  # a succeeded bench.ten_steps(5) run: five completed step records
    sleeping: str  # a bench.park run sleeping a month
    waiting: str  # a bench.wake run waiting for bench.go


def make_templates() -> Templates:
    """One run of each kind, taken to its state by a real ``runjobs --burst``."""
    from benchmarks.jobs import bench_park, bench_ten_steps, bench_wake

    finished = bench_ten_steps.using(queue="scale-template").enqueue(5)
    sleeping = bench_park.using(queue="scale-template").enqueue()
    waiting = bench_wake.using(queue="scale-template").enqueue("template")
    log = WORK / "scale_templates.log"
    proc = start_worker(["--burst", "--queue", "scale-template"], log)
    try:
        code = proc.wait(timeout=120)
    finally:
        stop_worker(proc)
    states = {
        str(run_id): str(status)
        for run_id, status in (
            (
                finished.pk,
                scalar(
                    "SELECT status FROM django_durable_jobs_jobrun WHERE id = %s", [finished.pk]
                ),
            ),
            (
                sleeping.pk,
                scalar(
                    "SELECT status FROM django_durable_jobs_jobrun WHERE id = %s", [sleeping.pk]
                ),
            ),
            (
                waiting.pk,
                scalar("SELECT status FROM django_durable_jobs_jobrun WHERE id = %s", [waiting.pk]),
            ),
        )
    }
    wanted = {
        str(finished.pk): "succeeded",
        str(sleeping.pk): "sleeping",
        str(waiting.pk): "waiting",
    }
    if code != 0 or states != wanted:
        raise RuntimeError(f"templates not made (runjobs exited {code}): {states}; see {log}")
    return Templates(str(finished.pk), str(sleeping.pk), str(waiting.pk))


def columns(table: str) -> list[str]:
    from django.db import connection

    with connection.cursor() as cursor:
        return [c.name for c in connection.introspection.get_table_description(cursor, table)]


def clone(
    table: str,
    template: str,
    overrides: Mapping[str, str],
    first: int,
    last: int,
    *,
    key: str = "id",
) -> None:
    """Copy the rows of ``table`` whose ``key`` is ``template`` once per ``g`` in
    ``first..last``; ``overrides`` maps a column to its SQL (``g`` and the template row
    ``t`` in scope); an identity ``id`` is left to the table."""
    names = [c for c in columns(table) if c != "id" or "id" in overrides]
    values = [overrides.get(c, f"t.{c}") for c in names]
    run_sql(
        f"INSERT INTO {table} ({', '.join(names)}) "
        f"SELECT {', '.join(values)} FROM {table} AS t, generate_series(%s, %s) AS g "
        f"WHERE t.{key} = %s",
        [first, last, template],
    )


RUNS = "django_durable_jobs_jobrun"
STEPS = "django_durable_jobs_steprecord"


def run_id(prefix: str) -> str:
    """The SQL of a generated run's id: the same for a run and its step records."""
    return f"md5('{prefix}' || g)::uuid"


def fill_finished(t: Templates, count: int) -> None:
    """``count`` finished runs (one in ``FAILED_EVERY`` failed), five steps each,
    finished evenly over the last ``HISTORY_DAYS`` days (the oldest first)."""
    age = f"(1 - g::float / {max(count, 1)}) * interval '{HISTORY_DAYS} days'"
    failed = f"g %% {FAILED_EVERY} = 0"
    runs = {
        "id": run_id("f"),
        "job_name": "'scale.job_' || (g %% 20)",
        "queue": "'default'",
        "status": f"CASE WHEN {failed} THEN 'failed' ELSE 'succeeded' END",
        "error": f"CASE WHEN {failed} THEN 'card declined' ELSE '' END",
        "error_type": f"CASE WHEN {failed} THEN 'ValueError' ELSE '' END",
        "created_at": f"now() - {age} - interval '3 seconds'",
        "started_at": f"now() - {age} - interval '2 seconds'",
        "finished_at": f"now() - {age}",
    }
    steps = {
        "run_id": run_id("f"),
        "started_at": f"now() - {age} - interval '2 seconds'",
        "completed_at": f"now() - {age} - interval '1 second'",
        "last_started_at": f"now() - {age} - interval '2 seconds'",
    }
    _chunked("finished runs", count, t.finished, runs, steps)


def fill_parked(t: Templates, count: int) -> None:
    """``count`` parked runs: half sleeping until a day in the next month, half waiting
    for ``bench.go`` with a key of their own (``park-<g>``) and a week's timeout; each
    wakes at a time of its own, a millisecond apart, as runs parked by real traffic
    do. (With one ``now()`` per INSERT, half a million runs shared a wake time, the
    claim's index stored them as a few deduplicated entries, and a scan past them
    looked free: benchmarks/README.md, "An idle claim behind parked runs".)"""
    sleeping, waiting = count // 2, count - count // 2
    apart = "g * interval '1 millisecond'"
    wake = f"now() + (1 + g %% 30) * interval '1 day' + {apart}"
    runs = {"id": run_id("s"), "queue": "'default'", "wake_at": wake}
    _chunked("sleeping runs", sleeping, t.sleeping, runs, {"run_id": run_id("s"), "wake_at": wake})
    week = f"now() + interval '7 days' + {apart}"
    runs = {"id": run_id("w"), "queue": "'default'", "wake_at": week}
    steps = {"run_id": run_id("w"), "correlation_key": "'park-' || g", "deadline": week}
    _chunked("waiting runs", waiting, t.waiting, runs, steps)


def fill_backlog(count: int) -> None:
    """``count`` queued no-op runs on the queue ``backlog``, which no measuring worker
    serves: a backlog that sits in the claim's index beside the measured queue."""
    from benchmarks.jobs import bench_noop

    for first in range(0, count, 10_000):
        bench_noop.using(queue="backlog").enqueue_many([()] * min(10_000, count - first))


def _chunked(
    what: str, count: int, template: str, runs: Mapping[str, str], steps: Mapping[str, str]
) -> None:
    """``count`` copies of the template run and its step records, ``CHUNK`` at a time."""
    started = time.perf_counter()
    for first in range(1, count + 1, CHUNK):
        last = min(first + CHUNK - 1, count)
        clone(RUNS, template, runs, first, last)
        clone(STEPS, template, steps, first, last, key="run_id")
        say(f"scale: {last:,} of {count:,} {what}")
    if count:
        say(f"scale: {count:,} {what} in {time.perf_counter() - started:.0f}s")


def fill(size: int, parked: int, backlog: int) -> Templates:
    """The tables of one size: ``size`` finished runs, ``parked`` parked, ``backlog``
    queued; then VACUUM ANALYZE, as a database that has lived would be."""
    t = make_templates()
    fill_finished(t, size)
    fill_parked(t, parked)
    fill_backlog(backlog)
    started = time.perf_counter()
    for table in (RUNS, STEPS):
        run_sql(f"VACUUM ANALYZE {table}")
    say(f"scale: VACUUM ANALYZE in {time.perf_counter() - started:.0f}s")
    return t
