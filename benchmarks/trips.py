"""Database round trips per durable step, counted on the wire.

One ``bench.ten_steps`` run claimed and executed in-process (a worker process cannot
be traced statement by statement), under ``CaptureQueriesContext`` (Django's
statements) and a libpq trace of the same connection (real round trips and
transactions, BEGIN/COMMIT included); also one ``enqueue()``, a no-op run, and the
worker's own loop in steady state. Statements are PREPAREd once per connection, so
each path is warmed up first and the PREPAREs are not counted.
"""

from __future__ import annotations

import os
import re
import tempfile
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from functools import partial
from pathlib import Path
from typing import TypeVar

from benchmarks.db import truncate
from benchmarks.harness import say

#: label -> (Django statements, wire counts, the statements' SQL)
Counted = dict[str, tuple[int, dict[str, int], list[str]]]
T = TypeVar("T")


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
    """The statement with its literals and the app's table prefix blanked: one line per
    kind of statement."""
    sql = " ".join(sql.split())
    sql = re.sub(r"'[^']*'", "?", sql)
    sql = re.sub(r"\b\d+(\.\d+)?\b", "?", sql)
    sql = re.sub(r'"django_durable_jobs_(\w+)"', r"\1", sql)
    return sql[:110] + ("..." if len(sql) > 110 else "")


def count(results: Counted, label: str, call: Callable[[], T]) -> T:
    """Run ``call`` under both counters; its result."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    with CaptureQueriesContext(connection) as q, libpq_trace() as wire:
        value = call()
    results[label] = (len(q), wire, [x["sql"] for x in q.captured_queries])
    return value


def count_claim_and_execute(results: Counted) -> None:
    from benchmarks.internals import claim, database_now, execute
    from benchmarks.jobs import bench_noop, bench_ten_steps

    count(results, "enqueue", bench_noop.enqueue)
    # Twice: statements are PREPAREd once per connection; the second pass is the steady state.
    for label, job in [("noop", bench_noop), ("ten_steps", bench_ten_steps)] * 2:
        truncate()
        job.enqueue()
        owner = f"bench-rt-{label}"
        lease = timedelta(seconds=60)
        claiming = partial(claim, owner, now=database_now(), lease=lease)
        claimed = count(results, f"claim_{label}", claiming)
        assert len(claimed) == 1, claimed
        executed = count(results, label, partial(execute, claimed[0], owner=owner))
        assert executed.status == "succeeded" and executed.recorded, executed


def count_worker_loop(results: Counted) -> None:
    """The worker's own loop: it writes a run's outcome with its next claim (one statement
    on PostgreSQL), so the steady state is what one run_once() sends after the first."""
    from benchmarks.internals import Worker, WorkerOptions, stop_heartbeat
    from benchmarks.jobs import bench_noop, bench_ten_steps
    from django_durable_jobs.models import JobRun

    truncate()
    jobs = (bench_noop, bench_noop, bench_ten_steps, bench_noop, bench_ten_steps)
    for job in jobs:
        job.enqueue()
    worker = Worker(WorkerOptions(burst=True, worker_id="bench-rt-worker"))
    try:
        for _ in range(3):  # warm up: reap expired leases, PREPARE the statements
            worker.run_once()
        for label in ("worker_noop", "worker_ten_steps"):
            # the previous outcome + claim + run this one
            worked = count(results, label, worker.run_once)
            assert worked, label
        while worker.run_once():
            pass
        worker.flush()
    finally:
        stop_heartbeat(worker)
    done = JobRun.objects.filter(status="succeeded").count()
    assert done == len(jobs), f"worker round trips: {done} of {len(jobs)} runs succeeded"


def measure_round_trips() -> list[str]:
    say("ours: database round trips per durable step (in-process claim + execute)")
    truncate()
    results: Counted = {}
    count_claim_and_execute(results)
    count_worker_loop(results)
    truncate()
    return trips_report(results)


def trips_report(results: Counted) -> list[str]:
    def line(what: str, key: str) -> str:
        stmts, wire, _ = results[key]
        return (
            f"  {what:48s} {stmts:3d} statements  {wire['round_trips']:3d} round trips  "
            f"{wire['transactions']:3d} transactions"
        )

    out: list[str] = []
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
        for sql, times in Counter(shape(s) for s in results[key][2]).items():
            out.append(f"    {times:3d} x {sql}")
    return out
