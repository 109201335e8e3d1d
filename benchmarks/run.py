#!/usr/bin/env python
"""Benchmark django-durable-jobs against its peers on this machine's PostgreSQL.

    .venv/py312-dj61/bin/python benchmarks/run.py            # full run, with peers
    .venv/py312-dj61/bin/python benchmarks/run.py --quick    # smoke run, ours only

Prints one table (our figures beside procrastinate's, django-tasks-db's and Absurd's,
the latter measured by the scripts in shared/bench), then our figures on MariaDB beside
PostgreSQL's (benchmarks/mariadb.py), the plan of our claim query and the database
round trips per durable step. Progress goes to stderr, the report to
stdout. See benchmarks/README.md for what each column means.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))
os.environ["DJANGO_SETTINGS_MODULE"] = "benchmarks.settings"

PEER_DIR = Path(
    os.environ.get("PEERBENCH_DIR", str(Path.home() / ".cache" / "peerbench"))
).expanduser()
PEER_OUT = Path(os.environ.get("PEERBENCH_OUT", str(PEER_DIR / "results"))).expanduser()
PEER_SCRIPTS = Path(os.environ.get("PEERBENCH_SCRIPTS", str(REPO.parent / "shared" / "bench")))
WORK = Path(os.environ.get("BENCH_WORK_DIR", str(REPO / ".tmp" / "bench")))
LAT_JOBS = int(os.environ.get("LAT_JOBS", "20"))
WAKE_EVENTS = int(os.environ.get("WAKE_EVENTS", "200"))
EXPLAIN_ROWS = 100_000

COLUMNS = (
    ("enqueue", "enqueue 1-by-1 /s"),
    ("bulk", "bulk enqueue /s"),
    ("w1", "1 worker jobs/s"),
    ("w2", "2 workers jobs/s"),
    ("latency", "start latency ms"),
    ("steps", "10-step steps/s"),
)


def say(message: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


@dataclass
class Row:
    name: str
    values: dict[str, float | None] = field(default_factory=dict)
    #: Why the whole row has no figures (a peer that could not be run).
    missing: str | None = None
    notes: list[str] = field(default_factory=list)


# ---------------------------------------------------------------- database helpers


def pg_params(dbname: str) -> dict[str, Any]:
    from django.conf import settings

    db = settings.DATABASES["default"]
    return {"host": db["HOST"], "port": db["PORT"], "user": db["USER"], "dbname": dbname}


def recreate_db() -> None:
    import psycopg
    from django.conf import settings
    from django.db import connections

    connections.close_all()
    name = settings.DATABASES["default"]["NAME"]
    with psycopg.connect(autocommit=True, **pg_params("postgres")) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')


def truncate() -> None:
    from django.db import connection

    from django_durable_jobs.models import Event, JobRun, StepRecord

    tables = ", ".join(m._meta.db_table for m in (StepRecord, Event, JobRun))
    with connection.cursor() as cursor:
        cursor.execute(f"TRUNCATE {tables} CASCADE")


def run_sql(sql: str, params: Sequence[Any] = ()) -> None:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(sql, params)


def scalar(sql: str, params: Sequence[Any] = ()) -> Any:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        row = cursor.fetchone()
    return None if row is None else row[0]


# ---------------------------------------------------------------- worker processes


def worker_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    path = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p)
    return {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "benchmarks.settings",
        "PYTHONPATH": path,
        **(extra or {}),
    }


def start_worker(args: Sequence[str], log: Path, env: dict[str, str] | None = None) -> Any:
    cmd = [sys.executable, "-m", "django", "runjobs", *args]
    with open(log, "w") as out:
        return subprocess.Popen(
            cmd,
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=REPO,
            env=worker_env(env),
            start_new_session=True,
        )


def stop_worker(proc: Any, timeout: float = 20) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def log_problems(log: Path) -> list[str]:
    """WARNING/ERROR lines and tracebacks a worker printed (it logs INFO per run)."""
    lines = log.read_text(errors="replace").splitlines()
    return [ln for ln in lines if " WARNING " in ln or " ERROR " in ln or "Traceback" in ln]


@dataclass
class Processed:
    rate: float
    seconds: float
    problems: list[str]


def process(
    args: Sequence[str], expected: int, label: str, env: dict[str, str] | None = None
) -> Processed:
    """Run ``runjobs --burst`` with ``args`` until it exits; jobs/s from the DB timestamps."""
    from django.db.models import Count, Max, Min, Q

    from django_durable_jobs.models import JobRun

    log = WORK / f"worker_{label}.log"
    proc = start_worker(["--burst", *args], log, env)
    try:
        code = proc.wait(timeout=max(300.0, expected / 5))
    except subprocess.TimeoutExpired:
        stop_worker(proc)
        raise RuntimeError(f"{label}: worker did not finish in time; see {log}") from None
    if code != 0:
        raise RuntimeError(f"{label}: runjobs exited {code}; see {log}")
    agg = JobRun.objects.aggregate(
        first=Min("started_at"),
        last=Max("finished_at"),
        ok=Count("id", filter=Q(status="succeeded")),
        total=Count("id"),
    )
    if agg["ok"] != expected or agg["total"] != expected:
        raise RuntimeError(
            f"{label}: {agg['ok']} of {agg['total']} runs succeeded, expected {expected}; see {log}"
        )
    seconds = (agg["last"] - agg["first"]).total_seconds()
    return Processed(expected / seconds, seconds, log_problems(log))


# ---------------------------------------------------------------- our measurements


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


def has_enqueue_many() -> bool:
    from django_durable_jobs.registry import JobDefinition

    return hasattr(JobDefinition, "enqueue_many")


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
    proc = start_worker([], log, {LAT_FILE_ENV: str(lat_file)})
    try:
        deadline = time.time() + 30
        while "wake=" not in log.read_text(errors="replace"):
            if proc.poll() is not None or time.time() > deadline:
                raise RuntimeError(f"latency worker did not start; see {log}")
            time.sleep(0.05)
        time.sleep(1.5)  # its first (empty) claim, then it LISTENs
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
    mode = re.search(r"wake=(\S+)", log.read_text(errors="replace"))
    return statistics.median(values), mode.group(1) if mode else "?", log_problems(log)


def pct(values: Sequence[float], q: int) -> float:
    """The ``q``-th percentile (inclusive method: p100 is the max)."""
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1]


def wait_status(run_id: Any, wanted: str, timeout: float, log: Path) -> Any:
    """Poll the database until the run has status ``wanted``; the ``JobRun``."""
    from django_durable_jobs.models import JobRun

    deadline = time.time() + timeout
    while True:
        run = JobRun.objects.only("status", "result", "error").get(pk=run_id)
        if run.status == wanted:
            return run
        if run.status in ("failed", "cancelled"):
            raise RuntimeError(f"wake run {run_id} {run.status}: {run.error}; see {log}")
        if time.time() > deadline:
            raise RuntimeError(f"wake run {run_id} not {wanted} after {timeout}s; see {log}")
        time.sleep(0.002)


@dataclass
class Wakeup:
    events: int
    mode: str
    latency_ms: list[float]  # publish_event commit -> the 'mark' step started
    claimed_ms: list[float]  # commit -> the wait step completed (woken, claimed, replayed)
    publish_ms: list[float]  # commit -> the atomic() block returned (on_commit wake-up)
    problems: list[str]


def measure_wakeup(events: int) -> Wakeup:
    """Commit of ``publish_event`` -> the waiting run's next step, on an idle worker."""
    from django.db import transaction

    from benchmarks.jobs import bench_wake
    from django_durable_jobs import publish_event
    from django_durable_jobs.models import StepRecord

    say(f"ours: event wake-up latency, {events} events to runs parked in wait_for_event")
    truncate()
    log = WORK / "worker_wakeup.log"
    proc = start_worker([], log)
    latency: list[float] = []
    claimed: list[float] = []
    published: list[float] = []
    commits: list[float] = []
    try:
        deadline = time.time() + 30
        while "wake=" not in log.read_text(errors="replace"):
            if proc.poll() is not None or time.time() > deadline:
                raise RuntimeError(f"wake-up worker did not start; see {log}")
            time.sleep(0.05)
        time.sleep(1.5)  # its first (empty) claim, then it LISTENs
        for i in range(events):
            key = f"wake-{i}"
            run = bench_wake.enqueue(key)
            wait_status(run.pk, "waiting", 30, log)
            # The worker is idle again (LISTEN, 1 s poll): publish at a random phase.
            time.sleep(random.uniform(0.05, 0.25))
            with transaction.atomic():
                # Registered before publish_event's own on_commit (wake_waiters + NOTIFY),
                # so it runs first: t0 is the moment COMMIT returned.
                transaction.on_commit(lambda: commits.append(time.time()))
                publish_event("bench.go", key=key)
            returned = time.time()
            t0 = commits[i]
            done = wait_status(run.pk, "succeeded", 30, log)
            latency.append((float(done.result) - t0) * 1000)
            published.append((returned - t0) * 1000)
            wait_step = StepRecord.objects.get(run_id=run.pk, name="w")
            if wait_step.completed_at is not None:
                claimed.append((wait_step.completed_at.timestamp() - t0) * 1000)
    finally:
        stop_worker(proc)
    truncate()
    mode = re.search(r"wake=(\S+)", log.read_text(errors="replace"))
    return Wakeup(
        events, mode.group(1) if mode else "?", latency, claimed, published, log_problems(log)
    )


def wakeup_report(w: Wakeup) -> list[str]:
    from django.conf import settings

    conf = settings.DURABLE_JOBS
    lat = w.latency_ms
    p50, p99 = pct(lat, 50), pct(lat, 99)
    met = p50 < 20 and p99 < 100
    rows = [
        ("commit -> next step starts", lat),
        ("  of which commit -> wait step done", w.claimed_ms),
        ("publish txn: commit -> atomic() returns", w.publish_ms),
    ]
    width = max(len(r[0]) for r in rows)
    out = [
        f"Event wake-up latency: {w.events} events, each to one run parked in "
        "step.wait_for_event (bench.wake), idle `runjobs` "
        f"(wake={w.mode}, POLL_INTERVAL {conf.get('POLL_INTERVAL', '1s')}, "
        f"EVENT_POLL {conf.get('EVENT_POLL', '30s')})",
        f"  {'ms':{width}s} |    p50 |    p99 |    max",
        f"  {'-' * width}-+--------+--------+-------",
    ]
    for title, values in rows:
        if values:
            out.append(
                f"  {title:{width}s} | {pct(values, 50):6.1f} | {pct(values, 99):6.1f} "
                f"| {max(values):6.1f}"
            )
    out += [
        f"  goal: p50 < 20 ms, p99 < 100 ms -> {'met' if met else 'NOT met'} "
        f"(p50 {p50:.1f} ms, p99 {p99:.1f} ms)",
        "  seed's design, for contrast: a waiting run stayed parked until its EVENT_POLL "
        "re-check, up to 30 s (about 15 s on average)",
        "  t0 = time.time() when the publishing transaction's COMMIT returned (first "
        "on_commit callback); 'next step starts' = the wall time ctx.step.run('mark', "
        "time.time) recorded in the worker (same machine)",
    ]
    return out


def measure_ours(n: int, nb: int) -> tuple[Row, list[str]]:
    from django.core.management import call_command

    from benchmarks.jobs import bench_noop, bench_ten_steps

    row = Row("django-durable-jobs (this repo)")
    problems: list[str] = []
    say(f"ours: recreating the database, migrate (N={n}, NB={nb})")
    recreate_db()
    call_command("migrate", verbosity=0)

    say(f"ours: enqueue {n} no-op runs one by one")
    row.values["enqueue"] = enqueue_one_by_one(n)
    say("ours: process them with 1 worker (runjobs --burst)")
    one = process([], n, "noop_1")
    row.values["w1"] = one.rate
    problems += one.problems
    truncate()
    say("ours: the same with Django's default CONN_MAX_AGE = 0 (BENCH_CONN_MAX_AGE=0)")
    enqueue_in_one_transaction(n, bench_noop)
    default_age = process([], n, "noop_1_conn_max_age_0", {"BENCH_CONN_MAX_AGE": "0"})
    problems += default_age.problems
    row.notes.append(
        f"1 worker with CONN_MAX_AGE=0 (Django's default): {default_age.rate:,.0f} jobs/s "
        f"(the table's figure: CONN_MAX_AGE=None)"
    )
    truncate()
    say("ours: the same with 1 worker serving one queue (runjobs --burst --queue default)")
    in_one_txn = enqueue_in_one_transaction(n, bench_noop)
    one_queue = process(["--queue", "default"], n, "noop_1_queue")
    problems += one_queue.problems
    row.notes.append(
        f"1 worker with --queue default: {one_queue.rate:,.0f} jobs/s "
        f"(the table's figure is a default worker, all queues)"
    )
    truncate()

    if has_enqueue_many():
        say(f"ours: enqueue {n} no-op runs with one enqueue_many() call")
        row.values["bulk"] = enqueue_many(n, bench_noop)
        row.notes.append(
            f"bulk = bench_noop.enqueue_many() of N calls (INSERTs of 1000 rows, one "
            f"transaction); N enqueue() in one transaction.atomic(): {in_one_txn:,.0f} /s"
        )
    else:
        say(f"ours: enqueue {n} no-op runs in one transaction")
        row.values["bulk"] = enqueue_in_one_transaction(n, bench_noop)
        row.notes.append("bulk = N enqueue() calls in one transaction.atomic() (no enqueue_many)")
    say("ours: process them with 2 workers (runjobs --burst --concurrency 2)")
    two = process(["--concurrency", "2"], n, "noop_2")
    row.values["w2"] = two.rate
    problems += two.problems
    truncate()

    say(f"ours: {nb} runs of bench.ten_steps, 1 worker")
    enqueue_in_one_transaction(nb, bench_ten_steps)
    durable = process([], nb, "ten_steps_1")
    row.values["steps"] = durable.rate * 10
    problems += durable.problems
    truncate()
    say(f"ours: {nb} runs of bench.ten_steps, 2 workers (--concurrency 2)")
    enqueue_in_one_transaction(nb, bench_ten_steps)
    durable2 = process(["--concurrency", "2"], nb, "ten_steps_2")
    problems += durable2.problems
    truncate()
    row.notes.append(
        f"10-step: {durable.rate:,.0f} runs/s with 1 worker; "
        f"2 workers: {durable2.rate * 10:,.0f} steps/s"
    )

    say(f"ours: enqueue->start latency, {LAT_JOBS} runs on an idle worker")
    latency, mode, lat_problems = measure_latency(LAT_JOBS)
    row.values["latency"] = latency
    problems += lat_problems
    from django.conf import settings

    poll = settings.DURABLE_JOBS.get("POLL_INTERVAL")
    row.notes.append(f"latency: idle worker woken by {mode} (POLL_INTERVAL {poll})")
    truncate()
    return row, problems


# ---------------------------------------------------------------- round trips per step


@contextmanager
def libpq_trace() -> Iterator[dict[str, int]]:
    """Count what really crosses the wire on Django's connection (BEGIN/COMMIT too)."""
    from django.db import connection
    from psycopg import pq

    connection.ensure_connection()
    pgconn = connection.connection.pgconn
    counts: dict[str, int] = {}
    with tempfile.NamedTemporaryFile("w", suffix=".trace", delete=False) as tmp:
        path = tmp.name
    handle = open(path, "w")  # noqa: SIM115 - libpq writes to its descriptor until untrace
    try:
        pgconn.trace(handle.fileno())
        pgconn.set_trace_flags(pq.Trace.SUPPRESS_TIMESTAMPS | pq.Trace.REGRESS_MODE)
        yield counts
    finally:
        pgconn.untrace()
        handle.close()
        lines = Path(path).read_text(errors="replace").splitlines()
        os.unlink(path)
        ready = [ln for ln in lines if ln.startswith("B") and "\tReadyForQuery\t" in ln]
        counts["round_trips"] = len(ready)
        # Back to idle ("I") = one transaction ended (an autocommit statement or a COMMIT).
        counts["transactions"] = sum(1 for ln in ready if ln.rstrip().endswith("I"))


def shape(sql: str) -> str:
    sql = " ".join(sql.split())
    sql = re.sub(r"'[^']*'", "?", sql)
    sql = re.sub(r"\b\d+(\.\d+)?\b", "?", sql)
    sql = re.sub(r'"django_durable_jobs_(\w+)"', r"\1", sql)
    return sql[:110] + ("..." if len(sql) > 110 else "")


def measure_round_trips() -> list[str]:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from benchmarks.jobs import bench_noop, bench_ten_steps
    from django_durable_jobs.db import claims
    from django_durable_jobs.engine import clock
    from django_durable_jobs.models import JobRun
    from django_durable_jobs.worker.execution import execute
    from django_durable_jobs.worker.loop import Worker, WorkerOptions

    say("ours: database round trips per durable step (in-process claim + execute)")
    truncate()
    out: list[str] = []
    results: dict[str, tuple[int, dict[str, int], list[str]]] = {}

    with CaptureQueriesContext(connection) as q, libpq_trace() as wire:
        bench_noop.enqueue()
    results["enqueue"] = (len(q), wire, [x["sql"] for x in q.captured_queries])

    # Twice: statements are PREPAREd once per connection; the second pass is the steady state.
    for label, job in [("noop", bench_noop), ("ten_steps", bench_ten_steps)] * 2:
        truncate()
        job.enqueue()
        owner = f"bench-rt-{label}"
        with CaptureQueriesContext(connection) as q, libpq_trace() as wire:
            claimed = claims.claim(owner, now=clock.current().now(), lease=timedelta(seconds=60))
        assert len(claimed) == 1, claimed
        results[f"claim_{label}"] = (len(q), wire, [x["sql"] for x in q.captured_queries])
        with CaptureQueriesContext(connection) as q, libpq_trace() as wire:
            executed = execute(claimed[0], owner=owner)
        assert executed.status == "succeeded" and executed.recorded, executed
        results[label] = (len(q), wire, [x["sql"] for x in q.captured_queries])

    # The worker's own loop: it writes a run's outcome with its next claim (one statement
    # on PostgreSQL), so the steady state is what one run_once() sends after the first.
    truncate()
    jobs = (bench_noop, bench_noop, bench_ten_steps, bench_noop, bench_ten_steps)
    for job in jobs:
        job.enqueue()
    worker = Worker(WorkerOptions(burst=True, worker_id="bench-rt-worker"))
    try:
        for _ in range(3):  # warm up: reap expired leases, PREPARE the statements
            worker.run_once()
        for label in ("worker_noop", "worker_ten_steps"):
            with CaptureQueriesContext(connection) as q, libpq_trace() as wire:
                worked = worker.run_once()  # the previous outcome + claim + run this one
            assert worked, label
            results[label] = (len(q), wire, [x["sql"] for x in q.captured_queries])
        while worker.run_once():
            pass
        worker.flush()
    finally:
        beat = getattr(worker, "_beat", None)
        if beat is not None:
            beat.stop()
    done = JobRun.objects.filter(status="succeeded").count()
    assert done == len(jobs), f"worker round trips: {done} of {len(jobs)} runs succeeded"
    truncate()

    def line(what: str, key: str) -> str:
        stmts, wire, _ = results[key]
        return (
            f"  {what:48s} {stmts:3d} statements  {wire['round_trips']:3d} round trips  "
            f"{wire['transactions']:3d} transactions"
        )

    ten, noop = results["ten_steps"], results["noop"]
    out.append("Database round trips (Django statements via CaptureQueriesContext; round trips")
    out.append("and transactions from a libpq trace of the same connection, BEGIN/COMMIT included)")
    out.append(line("enqueue() one run (autocommit)", "enqueue"))
    out.append(line("claims.claim() one run", "claim_ten_steps"))
    out.append(line("execution.execute() bench.noop", "noop"))
    out.append(line("execution.execute() bench.ten_steps (10 steps)", "ten_steps"))
    out.append(line("worker run_once(): outcome+claim+bench.noop", "worker_noop"))
    out.append(line("worker run_once(): outcome+claim+ten_steps", "worker_ten_steps"))
    per_step = ten[0] / 10
    marginal = (ten[0] - noop[0]) / 10
    wire_marginal = (ten[1]["round_trips"] - noop[1]["round_trips"]) / 10
    claim_rt = results["claim_ten_steps"][1]["round_trips"]
    out.append(
        f"  => per durable step: {per_step:.1f} statements (execute/10); marginal cost of a "
        f"step {marginal:.1f} statement(s), {wire_marginal:.1f} round trip(s)"
    )
    out.append(
        f"  => claim + execute() of a no-op run: {claim_rt + noop[1]['round_trips']} round trips "
        f"(claim {claim_rt} + execute {noop[1]['round_trips']}), "
        f"{results['claim_ten_steps'][1]['transactions'] + noop[1]['transactions']} transactions"
    )
    wn, wt = results["worker_noop"][1], results["worker_ten_steps"][1]
    out.append(
        f"  => per no-op run in a worker's loop (steady state): {wn['round_trips']} round "
        f"trip(s), {wn['transactions']} transaction(s); a ten-step run: {wt['round_trips']} "
        f"round trips ({(wt['round_trips'] - wn['round_trips']) / 10:.1f} per step)"
    )
    for key, title in (
        ("enqueue", "enqueue"),
        ("claim_ten_steps", "claim"),
        ("ten_steps", "execute(ten_steps)"),
        ("worker_noop", "worker run_once() (no-op)"),
    ):
        out.append(f"  statements of {title}:")
        for sql, count in Counter(shape(s) for s in results[key][2]).items():
            out.append(f"    {count:3d} x {sql}")
    return out


# ---------------------------------------------------------------- the claim's plan


@dataclass(frozen=True)
class ClaimSql:
    run: str  # what was sent (EXPLAIN-able: a statement, or EXECUTE of a prepared one)
    text: str  # the SQL to show: the statement, or the prepared statement's body
    sent: list[str]  # every statement of the claim


def claim_statement(queues: list[str] | None) -> ClaimSql:
    """The statement ``claims.claim`` sends to pick runs, captured from a real call.

    Whatever form the claim takes (a SELECT ... FOR UPDATE SKIP LOCKED then an UPDATE,
    one UPDATE ... FROM (SELECT ... SKIP LOCKED) statement, or an ``EXECUTE`` of such a
    statement prepared on the connection), the statement holding ``SKIP LOCKED`` is the
    one that looks for work. The call is rolled back (a PREPARE is not: it is per session).
    """
    from django.db import connection, transaction
    from django.test.utils import CaptureQueriesContext

    from django_durable_jobs.db import claims
    from django_durable_jobs.engine import clock

    with transaction.atomic(), CaptureQueriesContext(connection) as captured:
        claims.claim(
            "bench-explain", now=clock.current().now(), lease=timedelta(seconds=60), queues=queues
        )
        transaction.set_rollback(True)
    # A PREPARE (once per connection and statement) is not part of the steady state.
    sent = [
        q["sql"]
        for q in captured.captured_queries
        if "SAVEPOINT" not in q["sql"].upper() and not re.match(r"\s*PREPARE\b", q["sql"], re.I)
    ]
    for sql in sent:
        if "SKIP LOCKED" in sql.upper():
            return ClaimSql(sql, sql, sent)
        if m := re.match(r"\s*EXECUTE\s+(\w+)", sql, re.IGNORECASE):
            body = scalar("SELECT statement FROM pg_prepared_statements WHERE name = %s", [m[1]])
            if body and "SKIP LOCKED" in body.upper():
                return ClaimSql(sql, body, sent)
    raise RuntimeError(f"no SKIP LOCKED statement among the claim's statements: {sent}")


def explain(
    queues: list[str] | None, repeat: int = 5, before: str | None = None
) -> tuple[list[str], float]:
    """EXPLAIN (ANALYZE, BUFFERS) of the claim statement, rolled back; the last plan and
    the median execution ms. ``before``: SQL run first in the same transaction."""
    from django.db import connection, transaction

    times: list[float] = []
    plan: list[str] = []
    for _ in range(repeat):
        sql = claim_statement(queues).run
        with transaction.atomic(), connection.cursor() as cursor:
            if before:
                cursor.execute(before)
            cursor.execute("EXPLAIN (ANALYZE, BUFFERS) " + sql)
            plan = [r[0] for r in cursor.fetchall()]
            transaction.set_rollback(True)
        found = [
            float(m.group(1)) for ln in plan if (m := re.search(r"Execution Time: ([\d.]+)", ln))
        ]
        times.extend(found)
    return plan, statistics.median(times)


def insert_runs(count: int, status: str) -> None:
    """Bulk-insert ``count`` runs (succeeded: finished; queued: runnable now) in SQL."""
    from django.db import connection

    from django_durable_jobs.models import JobRun

    finished = status == "succeeded"
    values = {
        "id": "gen_random_uuid()",
        "job_name": "'bench.noop'",
        "queue": "'default'",
        "priority": "0",
        "status": f"'{status}'",
        "args": "'[]'::jsonb",
        "kwargs": "'{}'::jsonb",
        "result": "NULL",
        "error_code": "''",
        "error": "''",
        "error_type": "''",
        "traceback": "''",
        "attempt": "1" if finished else "0",
        "idempotency_key": "NULL",
        "created_at": "now() - g * interval '1 second'",
        "started_at": "now() - g * interval '1 second'" if finished else "NULL",
        "finished_at": "now() - g * interval '1 second'" if finished else "NULL",
        "wake_at": "NULL" if finished else "now() - g * interval '1 millisecond'",
        "lease_owner": "''",
        "lease_expires_at": "NULL",
        "parent_id": "NULL",
        "trace_context": "NULL",
    }
    for model_field in JobRun._meta.concrete_fields:  # columns added since: NULL or their default
        if model_field.column in values:
            continue
        default = model_field.get_default() if model_field.has_default() else None
        if model_field.null and default is None:
            values[model_field.column] = "NULL"
        elif isinstance(default, str):
            values[model_field.column] = "'" + default.replace("'", "''") + "'"
        elif isinstance(default, int):
            values[model_field.column] = str(default)
        else:
            raise RuntimeError(f"insert_runs: no value for new column {model_field.column}")
    columns = [str(f.column) for f in JobRun._meta.concrete_fields]
    table = JobRun._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {table} ({', '.join(columns)}) "
            f"SELECT {', '.join(values[c] for c in columns)} "
            f"FROM generate_series(1, {count}) AS g"
        )
        cursor.execute(f"ANALYZE {table}")


def measure_explain() -> list[str]:
    from benchmarks.jobs import bench_noop
    from django_durable_jobs.models import RUNNABLE, JobRun

    say(f"ours: EXPLAIN of the claim query with 0 and {EXPLAIN_ROWS:,} finished runs")
    truncate()
    for _ in range(5):
        bench_noop.enqueue()
    table = JobRun._meta.db_table
    run_sql(f"ANALYZE {table}")
    out: list[str] = []
    claim = claim_statement(None)
    out.append(
        f"The claim: claims.claim() sends {len(claim.sent)} statement(s) per claim; the one "
        "that picks runs (limit 1, all queues, as a default worker calls it):"
    )
    if claim.run != claim.text:
        out.append(f"  sent as: {claim.run}")
        out.append("  a statement prepared on the connection (pg_prepared_statements):")
    out.extend("  " + ln for ln in claim.text.strip().splitlines())
    if claim.run != claim.text:
        out.append(
            "  (EXPLAIN ... EXECUTE below: the plan PostgreSQL picks for the prepared "
            "statement, custom or generic)"
        )
    out.append("")

    def show(title: str, queues: list[str] | None, before: str | None = None) -> float:
        plan, ms = explain(queues, before=before)
        uses = any("durable_run_runnable" in ln for ln in plan)
        out.append(
            f"-- {title}: median execution {ms:.3f} ms; "
            f"uses durable_run_runnable: {'yes' if uses else 'NO'}"
        )
        out.extend("   " + ln for ln in plan)
        return ms

    empty = show("5 queued, 0 finished runs (a 5-row table: a seq scan is cheapest)", None)
    insert_runs(EXPLAIN_ROWS, "succeeded")
    full = show(f"5 queued, {EXPLAIN_ROWS:,} succeeded runs (after ANALYZE)", None)
    out.append(
        f"=> claim with 0 vs {EXPLAIN_ROWS:,} finished runs: {empty:.3f} ms vs {full:.3f} ms"
    )
    out.append("")
    insert_runs(EXPLAIN_ROWS, "queued")
    backlog_all = show(f"backlog of {EXPLAIN_ROWS:,} queued runs, all queues (default)", None)
    backlog_q = show(f"backlog of {EXPLAIN_ROWS:,} queued runs, --queue default", ["default"])
    statuses = ", ".join(f"'{s}'" for s in RUNNABLE)
    what_if = (
        f"CREATE INDEX bench_what_if ON {table} (priority DESC, wake_at) "
        f"WHERE status IN ({statuses})"
    )
    backlog_idx = show(
        f"backlog, all queues, WHAT-IF (rolled back, not in the migrations): {what_if}",
        None,
        before=what_if,
    )
    out.append(
        f"=> with a {EXPLAIN_ROWS:,}-run backlog one claim costs {backlog_all:.3f} ms "
        f"(all queues) vs {backlog_q:.3f} ms (--queue default); with the what-if index "
        f"{backlog_idx:.3f} ms"
    )
    truncate()
    return out


# ---------------------------------------------------------------- the peers


@dataclass(frozen=True)
class Peer:
    system: str  # common.Results' name: <system>.json
    venv: str  # setup.sh's name
    script: str
    metrics: dict[str, str]  # our column -> their metric name
    notes: tuple[str, ...] = ()


PEERS = (
    Peer(
        "procrastinate",
        "pr",
        "bench_procrastinate.py",
        {
            "enqueue": "enqueue one-by-one (defer) jobs/s",
            "bulk": "enqueue bulk (batch_defer x1000) jobs/s",
            "w1": "process 1 worker conc=1 jobs/s",
            "w2": "process 2 workers conc=1 jobs/s",
            "latency": "latency enqueue->start ms (LISTEN/NOTIFY)",
        },
        ("bulk = batch_defer of 1000", "latency: LISTEN/NOTIFY"),
    ),
    Peer(
        "django-tasks-db",
        "dj",
        "bench_django_tasks_db.py",
        {
            "enqueue": "enqueue one-by-one jobs/s",
            "bulk": "enqueue bulk_create jobs/s",
            "w1": "process 1 worker (CONN_MAX_AGE=600) jobs/s",
            "w2": "process 2 workers (CONN_MAX_AGE=600) jobs/s",
            "latency": "latency enqueue->start ms (interval=1s)",
        },
        (
            "workers with CONN_MAX_AGE=600 (persistent, like ours)",
            "bulk = bulk_create on its model (not a public API)",
            "latency: db_worker --interval 1s polling",
        ),
    ),
    Peer(
        "pgqueuer",
        "pgq",
        "bench_pgqueuer.py",
        {
            "enqueue": "enqueue one-by-one jobs/s",
            "bulk": "enqueue bulk (lists x1000) jobs/s",
            "w1": "process 1 worker (default batch 10) jobs/s",
            "w2": "process 2 workers (default) jobs/s",
            "latency": "latency enqueue->start ms (LISTEN/NOTIFY)",
        },
        ("claims 10 jobs per statement, batches completions", "latency: LISTEN/NOTIFY"),
    ),
    Peer(
        "absurd",
        "ab",
        "bench_absurd.py",
        {
            "enqueue": "A enqueue one-by-one (spawn) jobs/s",
            "bulk": "A enqueue in one txn (spawn x N, 1 COMMIT) jobs/s",
            "w1": "A process 1 worker conc=1 jobs/s",
            "w2": "A process 2 workers conc=1 jobs/s",
            "latency": "A latency enqueue->start ms (poll 0.25s)",
            "steps": "B 1 worker conc=1 steps/s",
        },
        ("bulk = N spawns in one transaction", "latency: polls every 0.25s"),
    ),
)

#: procrastinate's I/O workload (its script runs it when IO_N is set), beside ours.
PROCRASTINATE_IO = "IO 100ms awaits, 1 worker conc=100 jobs/s"
#: Extra figures worth a footnote: (system, metric, label).
PEER_EXTRAS = (
    (
        "django-tasks-db",
        "process 1 worker (CONN_MAX_AGE=0 default) jobs/s",
        "1 worker, CONN_MAX_AGE=0",
    ),
    (
        "django-tasks-db",
        "latency enqueue->start ms (interval=0.1s)",
        "latency with --interval 0.1s",
    ),
    ("procrastinate", "process 1 worker conc=4 jobs/s", "1 worker --concurrency 4"),
    ("procrastinate", PROCRASTINATE_IO, "I/O workload, 1 worker conc=100, jobs/s"),
    ("absurd", "A process 1 worker conc=4 jobs/s", "1 worker conc=4"),
    ("absurd", "B 2 workers conc=1 steps/s", "10-step, 2 workers, steps/s"),
)


def venv_python(peer: Peer) -> Path:
    return PEER_DIR / peer.venv / "bin" / "python"


def venv_ok(peer: Peer) -> bool:
    python = venv_python(peer)
    if not python.exists():
        return False
    return subprocess.run([python, "-c", "pass"], capture_output=True).returncode == 0


def ensure_venvs(peers: Sequence[Peer], setup: bool) -> dict[str, str]:
    """Venvs that are missing after setup.sh tried -> the reason."""
    missing = [p for p in peers if not venv_ok(p)]
    reasons: dict[str, str] = {}
    if missing and setup and (PEER_SCRIPTS / "setup.sh").exists():
        names = [p.venv for p in missing]
        say(f"peers: creating venvs {names} with setup.sh (uses PyPI, a few minutes)")
        done = subprocess.run(
            ["bash", str(PEER_SCRIPTS / "setup.sh"), *names],
            capture_output=True,
            text=True,
            env={**os.environ, "PEERBENCH_DIR": str(PEER_DIR)},
        )
        tail = (done.stdout + done.stderr).strip().splitlines()[-3:]
        for p in missing:
            if not venv_ok(p):
                reasons[p.system] = (
                    f"venv {PEER_DIR / p.venv} missing; setup.sh exited {done.returncode}: "
                    + " | ".join(tail)
                )
    else:
        for p in missing:
            why = "setup skipped (--no-setup)" if not setup else f"no {PEER_SCRIPTS}/setup.sh"
            reasons[p.system] = f"venv {PEER_DIR / p.venv} missing; {why}"
    return reasons


def run_peer(peer: Peer, n: int, nb: int) -> tuple[Row, dict[str, Any]]:
    row = Row(peer.system)
    result = PEER_OUT / f"{peer.system}.json"
    result.unlink(missing_ok=True)
    log = WORK / f"peer_{peer.system}.log"
    env = {
        **os.environ,
        "N": str(n),
        "NB": str(nb),
        "RUNS": "1",
        "PEERBENCH_DIR": str(PEER_DIR),
        "PEERBENCH_OUT": str(PEER_OUT),
        # procrastinate's script adds the I/O workload (2,000 awaits of 100 ms, conc 100).
        "IO_N": os.environ.get("IO_N", "2000"),
        "IO_CONC": os.environ.get("IO_CONC", "100"),
    }
    env.pop("DJANGO_SETTINGS_MODULE", None)
    env.pop("PYTHONPATH", None)
    say(f"peers: {peer.system} (log {log})")
    with open(log, "w") as out:
        try:
            code = subprocess.run(
                [str(venv_python(peer)), str(PEER_SCRIPTS / peer.script)],
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=PEER_SCRIPTS,
                env=env,
                timeout=3600,
            ).returncode
        except subprocess.TimeoutExpired:
            code = -1
    if code != 0 or not result.exists():
        tail = " | ".join(log.read_text(errors="replace").strip().splitlines()[-2:])
        row.missing = f"{peer.script} exited {code}: {tail}"
        return row, {}
    data = json.loads(result.read_text())
    row.name = data.get("version") or peer.system
    metrics = {k: v["median"] for k, v in data["metrics"].items()}
    for column, metric in peer.metrics.items():
        row.values[column] = metrics.get(metric)
        if metric not in metrics:
            row.notes.append(f"metric {metric!r} not in {result.name}")
    row.notes.extend(peer.notes)
    return row, metrics


# ---------------------------------------------------------------- MariaDB (ours only)


def measure_mariadb(quick: bool) -> dict[str, Any] | str:
    """benchmarks/mariadb.py in its own process (Django is set up once per process):
    its figures, or why there are none."""
    say("mariadb: our figures on MariaDB (benchmarks/mariadb.py)")
    out = WORK / "mariadb.json"
    out.unlink(missing_ok=True)
    cmd = [sys.executable, str(REPO / "benchmarks" / "mariadb.py"), "--json", str(out)]
    log = WORK / "mariadb.log"
    with open(log, "w") as log_file:
        code = subprocess.call(
            [*cmd, *(["--quick"] if quick else [])], stdout=log_file, stderr=log_file, cwd=REPO
        )
    if code != 0 or not out.exists():
        tail = log.read_text(errors="replace").strip().splitlines()[-1:] or ["?"]
        return f"benchmarks/mariadb.py exited {code}: {tail[0]} (see {log})"
    figures: dict[str, Any] = json.loads(out.read_text())
    return figures


def per_database(ours: Row, wakeup: Wakeup, mariadb: dict[str, Any] | str) -> list[str]:
    """Our figures on PostgreSQL beside MariaDB's."""
    if isinstance(mariadb, str):
        return [f"Ours per database: MariaDB n/a — {mariadb}"]
    rows = [
        ("1 worker jobs/s", ours.values.get("w1"), mariadb["w1"], ",.0f"),
        ("2 workers jobs/s", ours.values.get("w2"), mariadb["w2"], ",.0f"),
        ("10-step steps/s", ours.values.get("steps"), mariadb["steps"], ",.0f"),
        ("event wake p50 ms", pct(wakeup.latency_ms, 50), mariadb["wake_p50"], ",.1f"),
        ("event wake p99 ms", pct(wakeup.latency_ms, 99), mariadb["wake_p99"], ",.1f"),
    ]
    out = [
        f"Ours per database (PostgreSQL: wake={wakeup.mode}; MariaDB "
        f"{mariadb['server'].split('-')[0]}: wake={mariadb['wake_mode']}):",
        f"  {'':18s} | {'PostgreSQL':>10s} | {'MariaDB':>10s}",
        f"  {'-' * 18}-+-{'-' * 10}-+-{'-' * 10}",
    ]
    for title, pg, maria, spec in rows:
        pg_text = "—" if pg is None else format(pg, spec)
        out.append(f"  {title:18s} | {pg_text:>10s} | {format(maria, spec):>10s}")
    out += ["", "MariaDB:", *mariadb["wake_report"], *mariadb["explain"]]
    return out


# ---------------------------------------------------------------- the report


def fmt(value: float | None, column: str) -> str:
    if value is None:
        return "—"
    if column == "latency":
        return f"{value:,.1f}"
    return f"{value:,.0f}"


def table(rows: Sequence[Row]) -> list[str]:
    header = ["system", *(title for _, title in COLUMNS)]
    body = []
    for row in rows:
        if row.missing is not None:
            body.append([row.name, *(["n/a"] * len(COLUMNS))])
        else:
            body.append([row.name, *(fmt(row.values.get(key), key) for key, _ in COLUMNS)])
    widths = [max(len(r[i]) for r in [header, *body]) for i in range(len(header))]

    def render(cells: Sequence[str]) -> str:
        first = cells[0].ljust(widths[0])
        rest = (c.rjust(w) for c, w in zip(cells[1:], widths[1:], strict=True))
        return " | ".join([first, *rest])

    rule = "-+-".join("-" * w for w in widths)
    return [render(header), rule, *(render(r) for r in body)]


def ratios(ours: Row, peers: Sequence[Row]) -> list[str]:
    out = []
    for peer in peers:
        if peer.missing is not None:
            out.append(f"  ours / {peer.name}: n/a ({peer.missing})")
            continue
        parts = []
        for key, title in COLUMNS:
            a, b = ours.values.get(key), peer.values.get(key)
            if a and b:
                parts.append(f"{title} {a / b:.2f}x")
        w1a, w1b = ours.values.get("w1"), peer.values.get("w1")
        head = f"no-op 1 worker {w1a / w1b:.2f}x" if w1a and w1b else "no-op 1 worker n/a"
        out.append(f"  ours / {peer.name}: {head}   (all: {'; '.join(parts)})")
    return out


def environment(n: int, nb: int, wake_events: int) -> list[str]:
    import django

    version = scalar("SHOW server_version")
    from importlib.metadata import version as dist_version

    try:
        ours = dist_version("django-durable-jobs")
    except Exception:
        ours = "?"
    git = subprocess.run(
        ["git", "-C", str(REPO), "log", "-1", "--format=%h %s"], capture_output=True, text=True
    ).stdout.strip()
    dirty = subprocess.run(
        ["git", "-C", str(REPO), "status", "--porcelain", "--", "django_durable_jobs"],
        capture_output=True,
        text=True,
    ).stdout.strip()
    return [
        f"code: {git or '?'}" + (" + uncommitted changes in django_durable_jobs/" if dirty else ""),
        f"django-durable-jobs {ours} benchmark, {time.strftime('%Y-%m-%d %H:%M')} on "
        f"{platform.node()}: {os.cpu_count()} CPUs, PostgreSQL {version}, "
        f"Python {platform.python_version()}, Django {django.get_version()}",
        f"N={n} no-op jobs, NB={nb} ten-step runs, {LAT_JOBS} latency samples, "
        f"{wake_events} events for the wake-up latency; "
        "one run each (peers with RUNS=1). Numbers are machine-specific: compare ratios.",
    ]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="N=1000, NB=100, no peers")
    parser.add_argument("--no-peers", action="store_true", help="measure ours only")
    parser.add_argument(
        "--peers",
        default=",".join(p.system for p in PEERS),
        help="comma-separated peers to run (default: %(default)s)",
    )
    parser.add_argument("--no-setup", action="store_true", help="do not create missing peer venvs")
    parser.add_argument("--no-mariadb", action="store_true", help="skip the MariaDB column")
    args = parser.parse_args(argv)
    n = 1000 if args.quick else int(os.environ.get("N", "5000"))
    nb = 100 if args.quick else int(os.environ.get("NB", "500"))
    wanted = set() if args.quick or args.no_peers else set(args.peers.split(","))
    unknown = wanted - {p.system for p in PEERS}
    if unknown:
        parser.error(f"unknown peer(s) {sorted(unknown)}; known: {[p.system for p in PEERS]}")
    WORK.mkdir(parents=True, exist_ok=True)
    started = time.time()

    import django

    django.setup()

    ours, problems = measure_ours(n, nb)
    from benchmarks import io_bench
    from benchmarks.jobs import bench_anoop, bench_noop

    say(f"ours: I/O workload, {io_bench.IO_N} runs awaiting {io_bench.IO_MS} ms, 1 worker")
    io = io_bench.measure_io()
    say("ours: the I/O workload with CONN_MAX_AGE=0")
    io_default = io_bench.measure_io("io_conn_max_age_0", {"BENCH_CONN_MAX_AGE": "0"})
    problems += io.problems + io_default.problems
    rss_runs = 2000 if args.quick else io_bench.RSS_RUNS
    say(f"ours: worker RSS over {rss_runs} sync and {rss_runs} async no-op runs")
    rss = [io_bench.measure_rss(job, job.name, rss_runs) for job in (bench_noop, bench_anoop)]
    wakeup = measure_wakeup(50 if args.quick else WAKE_EVENTS)
    problems += wakeup.problems
    round_trips = measure_round_trips()
    plans = measure_explain()
    header = environment(n, nb, wakeup.events)
    mariadb = "skipped (--no-mariadb)" if args.no_mariadb else measure_mariadb(args.quick)

    peer_rows: list[Row] = []
    peer_metrics: list[dict[str, Any]] = []
    extras: list[str] = []
    peers = [p for p in PEERS if p.system in wanted]
    if peers:
        from django.db import connections

        connections.close_all()
        if not PEER_SCRIPTS.is_dir():
            reasons = {p.system: f"peer scripts not found at {PEER_SCRIPTS}" for p in peers}
        else:
            reasons = ensure_venvs(peers, setup=not args.no_setup)
        for peer in peers:
            if peer.system in reasons:
                peer_rows.append(Row(peer.system, missing=reasons[peer.system]))
                peer_metrics.append({})
                continue
            row, metrics = run_peer(peer, n, nb)
            peer_rows.append(row)
            peer_metrics.append(metrics)
            for system, metric, label in PEER_EXTRAS:
                if system == peer.system and metric in metrics:
                    extras.append(f"{row.name}: {label} = {metrics[metric]:,.1f}")

    print()
    print("\n".join(header))
    print()
    print("\n".join(table([ours, *peer_rows])))
    print()
    print("Notes:")
    for row in [ours, *peer_rows]:
        if row.missing is not None:
            print(f"  {row.name}: n/a — {row.missing}")
        for note in row.notes:
            print(f"  {row.name}: {note}")
    for extra in extras:
        print(f"  {extra}")
    print(
        "  '—' = not measured for that system (no durable steps in procrastinate, django-tasks-db)."
    )
    print()
    print("Ratios, ours / peer (>1: ours is better; for latency <1 is better):")
    print("\n".join(ratios(ours, peer_rows)) if peer_rows else "  (no peers run)")
    print()
    print("\n".join(io_bench.io_report(io, io_default, rss)))
    procrastinate_io = next(
        (m for p, m in zip(peers, peer_metrics, strict=True) if p.system == "procrastinate"),
        {},
    ).get(PROCRASTINATE_IO)
    if procrastinate_io:
        print(
            f"  procrastinate, same workload: {procrastinate_io:,.0f} jobs/s; ours / theirs "
            f"{io.rate / procrastinate_io:.2f}x"
        )
    print()
    print("\n".join(wakeup_report(wakeup)))
    print()
    print("\n".join(per_database(ours, wakeup, mariadb)))
    print()
    print("\n".join(plans))
    print()
    print("\n".join(round_trips))
    print()
    if problems:
        print(f"Worker log warnings/errors ({len(problems)}; logs in {WORK}):")
        for line in problems[:20]:
            print(f"  {line}")
    else:
        print(f"Worker logs: no warnings or errors (logs in {WORK}).")
    print(f"Total time {time.time() - started:,.0f} s.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
