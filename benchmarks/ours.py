"""Our workloads for the table's rows: enqueue rates, no-op throughput with 1 and 2
workers (tuned, and 1 worker under a plain project's settings), 10-step durable runs,
and the enqueue -> start latency on an idle worker.

Each workload starts on empty tables and is processed by real ``runjobs`` processes
(benchmarks/harness.py); rates come from the database's timestamps.
"""

from __future__ import annotations

import os
import random
import statistics
import time
from dataclasses import dataclass
from typing import Any

from benchmarks.db import recreate_db, truncate
from benchmarks.harness import (
    WORK,
    log_problems,
    process,
    say,
    start_idle_worker,
    stop_worker,
    wake_mode,
)
from benchmarks.report import Row

LAT_JOBS = int(os.environ.get("LAT_JOBS", "20"))
#: Django's default: what a plain project runs with (the table's row is tuned: None).
PLAIN_ENV = {"BENCH_CONN_MAX_AGE": "0"}


def enqueue_one_by_one(n: int) -> float:
    from benchmarks.jobs import bench_noop

    t = time.perf_counter()
    for _ in range(n):
        bench_noop.enqueue()
    return n / (time.perf_counter() - t)


def enqueue_in_one_transaction(n: int, job: Any, *args: Any) -> float:
    from django.db import transaction

    t = time.perf_counter()
    with transaction.atomic():
        for _ in range(n):
            job.enqueue(*args)
    return n / (time.perf_counter() - t)


def enqueue_many(n: int, job: Any) -> float:
    """``job.enqueue_many`` of ``n`` argument-less calls (batched INSERTs, one transaction)."""
    calls: list[tuple[Any, ...]] = [()] * n
    t = time.perf_counter()
    created = job.enqueue_many(calls)
    rate = n / (time.perf_counter() - t)
    if len(created) != n:
        raise RuntimeError(f"enqueue_many returned {len(created)} runs for {n} calls")
    return rate


def measure_latency(n: int) -> tuple[float, str, list[str]]:
    """Median ms from enqueue to the job's first line, on an idle (not --burst) worker."""
    from benchmarks.jobs import LAT_FILE_ENV, bench_lat

    lat_file = WORK / "latency.txt"
    lat_file.write_text("")
    log = WORK / "worker_latency.log"
    proc = start_idle_worker(log, "latency", {LAT_FILE_ENV: str(lat_file)})
    try:
        for i in range(n):
            time.sleep(random.uniform(0.2, 1.2))  # sample the poll cycle at a random phase
            bench_lat.enqueue(time.time())
            deadline = time.time() + 30
            while len(lat_file.read_text().split()) < i + 1:
                if time.time() > deadline:
                    raise RuntimeError(f"latency run {i} did not start within 30s; see {log}")
                time.sleep(0.002)
    finally:
        stop_worker(proc)
    values = [float(x) * 1000 for x in lat_file.read_text().split()]
    return statistics.median(values), wake_mode(log), log_problems(log)


def measure_ours(n: int, nb: int) -> tuple[Row, Row, list[str]]:
    """Our row of the table, the plain project's row (1 worker with Django's defaults),
    and the warnings the workers logged."""
    from django.core.management import call_command

    row = Row("django-durable-jobs (this repo)")
    say(f"ours: recreating the database, migrate (N={n}, NB={nb})")
    recreate_db()
    call_command("migrate", verbosity=0)
    plain, problems = _no_op_one_worker(row, n)
    problems += _no_op_bulk_two_workers(row, n)
    problems += _ten_steps(row, nb)
    problems += _latency(row)
    return row, plain, problems


def _no_op_one_worker(row: Row, n: int) -> tuple[Row, list[str]]:
    """The tuned figure (the table's, CONN_MAX_AGE=None) and a plain project's: the
    settings a user starts with, which the issue-14 goal is measured under too; and
    the plain project's again for a no-op without retries (``no_retries``)."""
    from benchmarks.jobs import bench_noop

    say(f"ours: enqueue {n} no-op runs one by one")
    row.values["enqueue"] = enqueue_one_by_one(n)
    say("ours: process them with 1 worker (runjobs --burst)")
    one = process([], n, "noop_1")
    row.values["w1"] = one.rate
    truncate()
    say("ours: the same with Django's default CONN_MAX_AGE = 0 (BENCH_CONN_MAX_AGE=0)")
    enqueue_in_one_transaction(n, bench_noop)
    default_age = process([], n, "noop_1_conn_max_age_0", PLAIN_ENV)
    row.notes.append(
        f"1 worker with CONN_MAX_AGE=0 (Django's default): {default_age.rate:,.0f} jobs/s "
        f"(the table's figure: CONN_MAX_AGE=None)"
    )
    plain = Row("django-durable-jobs, plain project")
    plain.values["w1"] = default_age.rate
    plain.notes.append(
        "1 worker under Django's defaults: CONN_MAX_AGE=0 and no LOGGING setting (runjobs "
        "logs INFO per run to stderr, as above); the row above only adds CONN_MAX_AGE=None"
    )
    truncate()
    once = no_retries(n, default_age.rate)
    plain.notes.append(once.note)
    return plain, one.problems + default_age.problems + once.problems


@dataclass
class NoRetries:
    rate: float
    note: str
    problems: list[str]


def no_retries(n: int, with_retries: float) -> NoRetries:
    """``n`` runs of ``bench.noop_once`` (``retries=0``: every run on its last attempt
    when claimed, as a ``django.tasks`` task) processed by 1 worker under a plain
    project's settings, beside ``with_retries``, the same no-op's rate with the default
    ``RETRIES`` (3)."""
    from benchmarks.jobs import bench_noop_once

    say("ours: the plain project's 1 worker again, for a no-op with retries=0")
    enqueue_in_one_transaction(n, bench_noop_once)
    once = process([], n, "noop_1_retries_0", PLAIN_ENV)
    truncate()
    note = (
        f"1 worker, plain project, no-op with retries=0 (bench.noop_once): "
        f"{once.rate:,.0f} jobs/s = {once.rate / with_retries:.2f}x of the same with "
        f"retries=3 ({with_retries:,.0f} jobs/s)"
    )
    return NoRetries(once.rate, note, once.problems)


def _no_op_bulk_two_workers(row: Row, n: int) -> list[str]:
    from benchmarks.jobs import bench_noop

    say("ours: the same with 1 worker serving one queue (runjobs --burst --queue default)")
    in_one_txn = enqueue_in_one_transaction(n, bench_noop)
    one_queue = process(["--queue", "default"], n, "noop_1_queue")
    row.notes.append(
        f"1 worker with --queue default: {one_queue.rate:,.0f} jobs/s "
        f"(the table's figure is a default worker, all queues)"
    )
    truncate()
    say(f"ours: enqueue {n} no-op runs with one enqueue_many() call")
    row.values["bulk"] = enqueue_many(n, bench_noop)
    row.notes.append(
        f"bulk = bench_noop.enqueue_many() of N calls (INSERTs of 1000 rows, one "
        f"transaction); N enqueue() in one transaction.atomic(): {in_one_txn:,.0f} /s"
    )
    say("ours: process them with 2 workers (runjobs --burst --concurrency 2)")
    two = process(["--concurrency", "2"], n, "noop_2")
    row.values["w2"] = two.rate
    truncate()
    return one_queue.problems + two.problems


def _ten_steps(row: Row, nb: int) -> list[str]:
    from benchmarks.jobs import bench_ten_steps

    say(f"ours: {nb} runs of bench.ten_steps, 1 worker")
    enqueue_in_one_transaction(nb, bench_ten_steps)
    durable = process([], nb, "ten_steps_1")
    row.values["steps"] = durable.rate * 10
    truncate()
    say(f"ours: {nb} runs of bench.ten_steps, 2 workers (--concurrency 2)")
    enqueue_in_one_transaction(nb, bench_ten_steps)
    durable2 = process(["--concurrency", "2"], nb, "ten_steps_2")
    truncate()
    row.notes.append(
        f"10-step: {durable.rate:,.0f} runs/s with 1 worker; "
        f"2 workers: {durable2.rate * 10:,.0f} steps/s"
    )
    return durable.problems + durable2.problems


def _latency(row: Row) -> list[str]:
    from django.conf import settings

    say(f"ours: enqueue->start latency, {LAT_JOBS} runs on an idle worker")
    latency, mode, problems = measure_latency(LAT_JOBS)
    row.values["latency"] = latency
    poll = settings.DURABLE_JOBS.get("POLL_INTERVAL")
    row.notes.append(f"latency: idle worker woken by {mode} (POLL_INTERVAL {poll})")
    truncate()
    return problems
