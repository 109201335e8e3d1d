"""What benchmarks/scale.py measures at each size, each a function on the filled tables.

Every workload runs on a queue of its own (``scale-*``) that its worker serves with
``--queue``, beside the filled history, the parked runs and the ``backlog`` queue, and
its runs are deleted afterwards, so the next probe sees the same tables.
"""

from __future__ import annotations

import io
import os
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from benchmarks.db import run_sql, scalar
from benchmarks.harness import REPO, WORK, log_problems, pct, say, start_worker, worker_env

#: Between two claims of the claim probe: a steady load a worker's claims put on the
#: database, not a flood (the purge beside it is what is measured).
PROBE_GAP_S = 0.005


def delete_queue(queue: str) -> None:
    """Delete a probe's runs and their steps (a workload leaves no rows behind)."""
    run_sql(
        "DELETE FROM django_durable_jobs_steprecord WHERE run_id IN "
        "(SELECT id FROM django_durable_jobs_jobrun WHERE queue = %s)",
        [queue],
    )
    run_sql("DELETE FROM django_durable_jobs_jobrun WHERE queue = %s", [queue])


def enqueue_rates(n: int) -> tuple[float, float]:
    """Runs/s enqueued one by one (autocommit), then in one ``enqueue_many``."""
    from benchmarks.jobs import bench_noop

    call = bench_noop.using(queue="scale-enqueue")
    started = time.perf_counter()
    for _ in range(n):
        call.enqueue()
    one = n / (time.perf_counter() - started)
    started = time.perf_counter()
    call.enqueue_many([()] * n)
    bulk = n / (time.perf_counter() - started)
    delete_queue("scale-enqueue")
    return one, bulk


def burst(queue: str, expected: int, steps_each: int, args: list[str], label: str) -> float:
    """``runjobs --burst --queue queue *args`` until it exits; runs/s (steps/s when
    ``steps_each``) from the database's first start to last finish."""
    log = WORK / f"scale_{label}.log"
    proc = start_worker(["--burst", "--queue", queue, *args], log)
    code = proc.wait(timeout=max(600.0, expected / 5))
    done, first, last = _finished(queue)
    if code != 0 or done != expected:
        raise RuntimeError(f"{label}: runjobs exited {code}, {done} of {expected} runs; see {log}")
    for problem in log_problems(log)[:5]:
        say(f"scale: {label}: {problem}")
    seconds = (last - first).total_seconds()
    return float(expected * max(steps_each, 1) / seconds)


def _finished(queue: str) -> tuple[int, Any, Any]:
    from django.db.models import Count, Max, Min, Q

    from django_durable_jobs.models import JobRun

    agg = JobRun.objects.filter(queue=queue).aggregate(
        ok=Count("id", filter=Q(status="succeeded")),
        first=Min("started_at"),
        last=Max("finished_at"),
    )
    return agg["ok"], agg["first"], agg["last"]


def no_op(n: int, processes: int) -> float:
    from benchmarks.jobs import bench_noop

    bench_noop.using(queue="scale-noop").enqueue_many([()] * n)
    rate = burst("scale-noop", n, 0, ["--concurrency", str(processes)], f"noop_{processes}")
    delete_queue("scale-noop")
    return rate


def ten_steps(nb: int) -> float:
    from benchmarks.jobs import bench_ten_steps

    bench_ten_steps.using(queue="scale-steps").enqueue_many([()] * nb)
    rate = burst("scale-steps", nb, 10, [], "ten_steps")
    delete_queue("scale-steps")
    return rate


@dataclass
class ClaimProbe:
    """The worker's claim statement (``claims.claim``, one run, the queue
    ``scale-probe``) sent in a loop from a thread with a connection of its own, each
    claimed run then finished as a worker would: the latency of each claim, in ms."""

    latencies: list[float] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)

    def run(self, limit: int | None = None) -> None:
        from django.db import connection

        from benchmarks.internals import SystemClock, claim
        from django_durable_jobs.models import JobRun

        clock, owner = SystemClock(), f"scale:{os.getpid()}#probe"
        try:
            while not self.stop.is_set() and (limit is None or len(self.latencies) < limit):
                now = clock.now()
                started = time.perf_counter()
                runs = claim(owner, now=now, lease=timedelta(minutes=5), queues=["scale-probe"])
                self.latencies.append((time.perf_counter() - started) * 1000)
                if not runs:
                    raise RuntimeError("the claim probe ran out of runs: enqueue more")
                JobRun.objects.filter(pk=runs[0].pk).update(
                    status="succeeded", finished_at=now, lease_owner="", lease_expires_at=None
                )
                time.sleep(PROBE_GAP_S)
        finally:
            connection.close()


def prime_probe(n: int) -> None:
    from benchmarks.jobs import bench_noop

    bench_noop.using(queue="scale-probe").enqueue_many([()] * n)


def claims(n: int) -> list[float]:
    """``n`` claims of the probe, one after the other; their latencies (ms)."""
    prime_probe(n)
    probe = ClaimProbe()
    probe.run(limit=n)
    delete_queue("scale-probe")
    return probe.latencies


#: Runs queued for the claim probe beside a purge and without one: the same backlog for
#: both, or the figures compare two backlogs (a claim that read its queue's backlog
#: made 10,000 against 100,000 look like 7.6x the purge's doing).
PURGE_BACKLOG = 100_000


def during(work: Callable[[], None], budget_runs: int) -> tuple[float, list[float]]:
    """Seconds ``work`` took, and the claim probe's latencies while it ran."""
    prime_probe(budget_runs)
    probe = ClaimProbe()
    thread = threading.Thread(target=probe.run, name="claim-probe")
    thread.start()
    started = time.perf_counter()
    try:
        work()
    finally:
        seconds = time.perf_counter() - started
        probe.stop.set()
        thread.join()
    delete_queue("scale-probe")
    return seconds, probe.latencies


def purge_oldest(count: int, *options: str) -> Callable[[], None]:
    """The call that deletes the oldest ``count`` finished runs: ``manage.py jobs purge
    --older-than`` (the age of the ``count``-th oldest) ``*options`` in a process of its
    own, as the retention schedule or an operator runs it."""
    age = scalar(
        "SELECT EXTRACT(EPOCH FROM now() - finished_at)::bigint FROM django_durable_jobs_jobrun "
        "WHERE status IN ('succeeded', 'failed') ORDER BY finished_at OFFSET %s LIMIT 1",
        [max(count - 1, 0)],
    )

    def purge() -> None:
        if age is None:
            return
        cmd = [sys.executable, "-m", "django", "jobs", "purge", "--older-than", f"{int(age)}s"]
        cmd += options
        with open(WORK / "scale_purge.log", "w") as out:
            subprocess.run(
                cmd, cwd=REPO, env=worker_env(), stdout=out, stderr=subprocess.STDOUT, check=True
            )

    return purge


def finished_runs() -> int:
    return int(
        scalar(
            "SELECT count(*) FROM django_durable_jobs_jobrun "
            "WHERE status IN ('succeeded', 'failed', 'cancelled', 'skipped')"
        )
    )


def fold_ms() -> float:
    """The first dashboard page after an upgrade, or after a day without one: the
    day's hours and the last two hours' minutes folded into their rollups
    (observe/rollups.py) at once, in ms."""
    from datetime import UTC, datetime

    from benchmarks.internals import rollups, stats
    from django_durable_jobs.models import RunTally

    RunTally.objects.filter(name__in=(rollups.HOURS.name, rollups.MINUTES.name)).delete()
    started = time.perf_counter()
    stats.series(datetime.now(UTC), step=timedelta(hours=1), buckets=24)
    return (time.perf_counter() - started) * 1000


def page_ms() -> tuple[float, float]:
    """The dashboard's queries as the page runs them (``admin/dashboard.py``'s
    ``figures``: the rollups read once, ``stats.collect`` and the two series), and
    ``jobs stats --json``: the median of 3 after a warm-up, in ms."""
    from datetime import UTC, datetime

    from django.core.management import call_command

    from benchmarks.internals import rollups, stats

    minute, hour = timedelta(minutes=1), timedelta(hours=1)

    def page() -> None:
        now = datetime.now(UTC)
        folded = rollups.read(now)
        stats.collect(now=now, folded=folded)
        stats.series(now, step=minute, buckets=60, folded=folded)
        stats.series(now, step=hour, buckets=24, folded=folded)

    def jobs_stats() -> None:
        call_command("jobs", "stats", "--json", stdout=io.StringIO())

    return _median_ms(page), _median_ms(jobs_stats)


def _median_ms(call: Callable[[], None]) -> float:
    call()
    times = []
    for _ in range(3):
        started = time.perf_counter()
        call()
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


def table_sizes() -> dict[str, dict[str, float]]:
    """Per table of ours: table and index MB, live and dead tuples (the statistics
    collector's, after a moment for it to catch up)."""
    from django.db import connection

    time.sleep(1)
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT relname, pg_table_size(relid), pg_indexes_size(relid), n_live_tup, n_dead_tup "
            "FROM pg_stat_user_tables WHERE relname LIKE 'django_durable_jobs_%%' ORDER BY relname"
        )
        rows = cursor.fetchall()
    mb = 1024 * 1024
    return {
        name.removeprefix("django_durable_jobs_"): {
            "table_mb": round(table / mb, 1),
            "index_mb": round(index / mb, 1),
            "live": live,
            "dead": dead,
        }
        for name, table, index, live, dead in rows
        if table > 8192 * 2
    }


def percentiles(values: list[float]) -> tuple[float, float]:
    return round(pct(values, 50), 2), round(pct(values, 99), 2)
