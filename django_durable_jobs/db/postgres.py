"""The claim on PostgreSQL: one prepared statement that also records the previous
run's outcome, so a worker pays one round trip and one commit per run.

The statement is ``PREPARE``d once per connection (planning the CTE costs as much
as running it), unless ``DISABLE_SERVER_SIDE_CURSORS`` says a transaction-pooling
PgBouncer sits in between, where named statements do not survive.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.db import connections
from django.db.models import JSONField

from ..models import JobRun

#: The columns a claim returns and a JobRun is built from, in model order.
_FIELDS = [field for field in JobRun._meta.concrete_fields]
_COLUMNS = ", ".join(f"run.{field.column}" for field in _FIELDS)
_JSON = {field.attname: field for field in _FIELDS if isinstance(field, JSONField)}
#: What recording an outcome writes (the rest of the row stays as claimed).
OUTCOME_COLUMNS = (
    "status",
    "result",
    "finished_at",
    "wake_at",
    "error_code",
    "error",
    "error_type",
    "traceback",
)

_SELECT = """
picked AS (
    SELECT id, status, started_at FROM {table}
    WHERE status IN ('queued', 'sleeping', 'waiting') AND wake_at <= $1 {queues}
        -- runs under a limit are claimed one key at a time, by flow.claim_limited
        AND concurrency_limit IS NULL AND throttle_limit IS NULL
    ORDER BY priority DESC, wake_at
    LIMIT $2
    FOR UPDATE SKIP LOCKED
),
claimed AS (
    UPDATE {table} AS run SET
        status = 'running',
        attempt = CASE WHEN picked.status = 'queued' THEN run.attempt + 1 ELSE run.attempt END,
        started_at = COALESCE(run.started_at, $1),
        lease_owner = $3,
        lease_expires_at = $4
    FROM picked WHERE run.id = picked.id
    RETURNING {columns}, picked.status AS claimed_from, picked.started_at IS NULL AS fresh
)"""
_DONE = """
done AS (
    UPDATE {table} SET status = $6, result = $7, finished_at = $8, wake_at = $9,
        error_code = $10, error = $11, error_type = $12, traceback = $13,
        lease_owner = '', lease_expires_at = NULL
    WHERE id = $14 AND lease_owner = $15 AND status = 'running'
    RETURNING id
),"""
_TYPES = ["timestamptz", "int", "text", "timestamptz", "text[]"]
_DONE_TYPES = [
    "text",
    "jsonb",
    "timestamptz",
    "timestamptz",
    "text",
    "text",
    "text",
    "text",
    "uuid",
    "text",
]

_prepared: weakref.WeakKeyDictionary[Any, set[str]] = weakref.WeakKeyDictionary()


@dataclass(frozen=True)
class Finish:
    """A run's outcome to record in the same statement as the next claim."""

    run_id: Any
    owner: str
    values: dict[str, Any]


def available(using: str) -> bool:
    """This fast path needs PostgreSQL through psycopg 3."""
    connection = connections[using]
    database = getattr(connection, "Database", None)
    return connection.vendor == "postgresql" and getattr(database, "__name__", "") == "psycopg"


def claim(
    using: str,
    owner: str,
    now: datetime,
    lease: timedelta,
    queues: list[str] | None,
    limit: int,
    finish: Finish | None = None,
) -> tuple[list[JobRun], bool]:
    """Claim up to ``limit`` runs (and record ``finish``); returns the runs and whether
    ``finish`` was recorded (False: its lease was lost)."""
    from psycopg.types.json import Jsonb  # psycopg is only needed on PostgreSQL

    connection = connections[using]
    name, sql = _statement(connection, queues, finish is not None)
    params: list[Any] = [now, limit, owner, now + lease, queues or []]
    if finish is not None:
        values = finish.values
        params += [
            values["status"],
            Jsonb(values["result"]),
            values["finished_at"],
            values["wake_at"],
            values["error_code"],
            values["error"],
            values["error_type"],
            values["traceback"],
            finish.run_id,
            finish.owner,
        ]
    with connection.cursor() as cursor:
        execute(cursor, name, sql, params)
        rows = cursor.fetchall()
    done = bool(rows and rows[0][0])
    runs = [_run(using, connection, row[1:]) for row in rows if row[1] is not None]
    runs.sort(key=lambda run: (-run.priority, run.wake_at or now))
    return runs, done


def _statement(
    connection: Any, queues: list[str] | None, finishing: bool
) -> tuple[str | None, str]:
    table = connection.ops.quote_name(JobRun._meta.db_table)
    if queues is None:
        queue_filter, variant = "", "all"
    elif len(queues) == 1:
        # An equality lets the planner walk durable_run_runnable in order; "= ANY"
        # cannot, and would sort the whole backlog on every claim.
        queue_filter, variant = "AND queue = ($5::text[])[1]", "one"
    else:
        queue_filter, variant = "AND queue = ANY($5)", "many"
    ctes = (_DONE if finishing else "") + _SELECT
    body = (
        "WITH "
        + ctes.format(table=table, queues=queue_filter, columns=_COLUMNS)
        + "\nSELECT "
        + ("(SELECT count(*) FROM done)" if finishing else "0")
        + ", claimed.* FROM (SELECT 1) AS one LEFT JOIN claimed ON true"
    )
    types = _TYPES + (_DONE_TYPES if finishing else [])
    if connection.settings_dict.get("DISABLE_SERVER_SIDE_CURSORS"):
        return None, numbered_to_named(body, len(types))
    name = f"durable_claim_{variant}_{'f' if finishing else 'c'}"
    return (name if prepare(connection, name, types, body) else None), body


def prepare(connection: Any, name: str, types: list[str], body: str) -> bool:
    """``PREPARE`` ``body`` as ``name`` on this connection, once; False where named
    statements cannot be used (``DISABLE_SERVER_SIDE_CURSORS``: PgBouncer)."""
    if connection.settings_dict.get("DISABLE_SERVER_SIDE_CURSORS"):
        return False
    connection.ensure_connection()
    done = _prepared.setdefault(connection.connection, set())
    if name not in done:
        with connection.cursor() as cursor:
            cursor.execute(f"PREPARE {name}({', '.join(types)}) AS {body}")
        done.add(name)
    return True


def numbered_to_named(sql: str, count: int) -> str:
    """$1..$n placeholders to named ones, for servers without prepared statements."""
    for number in range(count, 0, -1):
        sql = sql.replace(f"${number}", f"%(p{number})s")
    return sql


def execute(cursor: Any, name: str | None, sql: str, params: list[Any]) -> None:
    """Run a statement from ``prepare``: by name, or (unprepared) as text."""
    if name is None:
        cursor.execute(sql, {f"p{number}": value for number, value in enumerate(params, 1)})
    else:
        cursor.execute(f"EXECUTE {name}({', '.join(['%s'] * len(params))})", params)


def _run(using: str, connection: Any, row: tuple[Any, ...]) -> JobRun:
    values = list(row[: len(_FIELDS)])
    for index, field in enumerate(_FIELDS):
        if (json_field := _JSON.get(field.attname)) is not None:
            values[index] = json_field.from_db_value(values[index], None, connection)  # type: ignore[arg-type]
    run = JobRun.from_db(using, [field.attname for field in _FIELDS], values)
    run.claimed_from, run.claimed_fresh = row[len(_FIELDS)], bool(row[len(_FIELDS) + 1])
    return run


_INSERT_MANY = """
INSERT INTO {table} (id, job_name, queue, priority, status, args, kwargs, result,
    error_code, error, error_type, traceback, attempt, created_at, wake_at, lease_owner,
    trace_context)
SELECT id, %s, %s, %s, 'queued', args::jsonb, kwargs::jsonb, NULL, '', '', '', '', 0, %s,
    wake_at, '', %s::jsonb
FROM unnest(%s::uuid[], %s::text[], %s::text[], %s::timestamptz[]) AS r(id, args, kwargs, wake_at)
"""


def insert_runs(using: str, runs: list[JobRun], batch_size: int) -> None:
    """``bulk_create`` for queued runs of one job in ``unnest`` arrays: the rows cost
    the database little, and building Django's per-row SQL cost most of the time."""
    import json

    connection = connections[using]
    sql = _INSERT_MANY.format(table=connection.ops.quote_name(JobRun._meta.db_table))
    with connection.cursor() as cursor:
        for start in range(0, len(runs), batch_size):
            batch = runs[start : start + batch_size]
            first = batch[0]
            cursor.execute(
                sql,
                [
                    first.job_name,
                    first.queue,
                    first.priority,
                    first.created_at,
                    # One enqueue_many call has one caller, hence one trace context.
                    None if first.trace_context is None else json.dumps(first.trace_context),
                    [run.pk for run in batch],
                    [json.dumps(run.args, ensure_ascii=False) for run in batch],
                    [json.dumps(run.kwargs, ensure_ascii=False) for run in batch],
                    [run.wake_at for run in batch],
                ],
            )
    for run in runs:
        run._state.adding = False
        run._state.db = using
