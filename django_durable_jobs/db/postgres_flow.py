"""The flow-control functions of migration 0014 on PostgreSQL, called: runs under a
concurrency limit claimed (with the previous one's outcome) and finished, each in one
call. The statements of runs under no limit are ``postgres``'s."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from django.db import connections

from ..models import JobRun
from .postgres import (
    FIELDS,
    OUTCOME_COLUMNS,
    Finish,
    fast_timestamps,
    outcome_params,
    run_from_row,
)

#: The flow claim's statement, built once per process.
_CONCURRENCY_SQL: str | None = None


def claim_concurrency(
    using: str,
    owner: str,
    now: datetime,
    lease: timedelta,
    queues: list[str] | None,
    limit: int,
    candidates: int,
    finish: Finish | None,
) -> tuple[list[JobRun], bool, bool]:
    """Claim up to ``limit`` runs under a concurrency limit (and record ``finish``, the
    outcome of one, first) with ``durable_claim_concurrency`` (migration 0014); returns
    the runs, whether ``finish`` was recorded, and whether runnable runs under a
    throttle were seen among the candidates (``flow.claim_limited`` takes those)."""
    connection = connections[using]
    outcome: list[Any] = [None] * (2 + len(OUTCOME_COLUMNS))
    if finish is not None:
        outcome = [finish.run_id, finish.owner, *outcome_params(finish.values, connection)]
    params = [now, owner, now + lease, queues, limit, candidates, *outcome]
    global _CONCURRENCY_SQL
    if _CONCURRENCY_SQL is None:
        qn = connection.ops.quote_name
        columns = ", ".join(f"(c.run).{qn(str(field.column))}" for field in FIELDS)
        _CONCURRENCY_SQL = (
            f"SELECT c.finished, c.throttled, {columns}, c.claimed_from, c.fresh "
            f"FROM durable_claim_concurrency({', '.join(['%s'] * len(params))}) AS c"
        )
    with connection.cursor() as cursor:
        fast_timestamps(connection, cursor)
        cursor.execute(_CONCURRENCY_SQL, params)
        rows = cursor.fetchall()
    *claimed, flags = rows  # the last row is the flags'
    runs = [run_from_row(using, connection, row[2:]) for row in claimed]
    return runs, bool(flags[0]), bool(flags[1])


def finish_concurrency(using: str, finish: Finish, now: datetime) -> bool:
    """Record ``finish``, the outcome of a run under a concurrency limit, and free its
    slot, with ``durable_finish_concurrency`` (migration 0014)."""
    connection = connections[using]
    params = [finish.run_id, finish.owner, now, *outcome_params(finish.values, connection)]
    with connection.cursor() as cursor:
        marks = ", ".join(["%s"] * len(params))
        cursor.execute(f"SELECT durable_finish_concurrency({marks})", params)
        return bool(cursor.fetchone()[0])
