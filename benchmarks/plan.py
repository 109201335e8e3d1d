"""The claim's plan: the statement ``claim`` sends to pick a run, captured from a real
call, under ``EXPLAIN (ANALYZE, BUFFERS)`` (rolled back).

With 5 queued runs beside 0, then 100,000 finished runs (it must use the partial index
``durable_run_runnable`` and not slow down), and behind a backlog of 100,000 queued runs
(all queues, ``--queue default``, and a rolled-back what-if index).
"""

from __future__ import annotations

import re
import statistics
from dataclasses import dataclass
from datetime import timedelta

from benchmarks.db import run_columns, run_sql, scalar, truncate
from benchmarks.harness import say

EXPLAIN_ROWS = 100_000


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

    from benchmarks.internals import claim, database_now

    with transaction.atomic(), CaptureQueriesContext(connection) as captured:
        claim("bench-explain", now=database_now(), lease=timedelta(seconds=60), queues=queues)
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
        "attempt_started_by": "''",
        "parent_id": "NULL",
        "trace_context": "NULL",
    }
    columns, sql = run_columns(values)
    table = JobRun._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {table} ({', '.join(columns)}) "
            f"SELECT {', '.join(sql)} "
            f"FROM generate_series(1, {count}) AS g"
        )
        cursor.execute(f"ANALYZE {table}")


def describe(claim: ClaimSql) -> list[str]:
    """The claim's statement as sent, and its body when it is a prepared one."""
    out = [
        f"The claim: claims.claim() sends {len(claim.sent)} statement(s) per claim; the one "
        "that picks runs (limit 1, all queues, as a default worker calls it):"
    ]
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
    return out


def measure_explain() -> list[str]:
    from benchmarks.jobs import bench_noop
    from django_durable_jobs.models import RUNNABLE, JobRun

    say(f"ours: EXPLAIN of the claim query with 0 and {EXPLAIN_ROWS:,} finished runs")
    truncate()
    for _ in range(5):
        bench_noop.enqueue()
    table = JobRun._meta.db_table
    run_sql(f"ANALYZE {table}")
    out = describe(claim_statement(None))

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
