"""The flow-control functions of ``sql/schema.sql`` on PostgreSQL, called: runs under a
concurrency limit claimed (with the outcomes of earlier ones) and finished, a batch
in one call. The statements of runs under no limit are ``postgres``'s."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from django.db import connections
from django.db.models import DateTimeField

from ...models import JobRun
from ..executable import Executable
from ..paused import Paused
from .claims import FIELDS, OUTCOME_COLUMNS, Finish, outcome_arrays, run_from_row
from .statements import kept_cursor

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
    finishes: Sequence[Finish],
    only: Executable | None = None,
    paused: Paused | None = None,
) -> tuple[list[JobRun], frozenset[Any], bool]:
    """Claim up to ``limit`` runs under a concurrency limit (and record ``finishes``, the
    outcomes of such runs, first) with ``durable_claim_concurrency``;
    returns the runs, the ids of the outcomes recorded, and whether runnable runs
    under a throttle were seen among the candidates (``flow.claim_limited`` takes
    those). ``only``: the jobs and versions this worker may take (a rolling deploy);
    ``paused``: the queues and jobs paused (NULL arrays: none)."""
    connection = connections[using]
    params = [
        now,
        owner,
        now + lease,
        queues,
        limit,
        candidates,
        *_finish_arrays(finishes, connection),
        *(only.keys if only is not None else (None, None)),
        only.overdue if only is not None else None,
        *(paused.keys if paused else (None, None)),
    ]
    global _CONCURRENCY_SQL
    if _CONCURRENCY_SQL is None:
        qn = connection.ops.quote_name
        columns = ", ".join(f"(c.run).{qn(str(field.column))}" for field in FIELDS)
        heads = ("timestamptz", "text", "timestamptz", "text[]", "integer", "integer")
        marks = _marks(*heads, *ARRAY_TYPES, *VERSION_TYPES, *PAUSED_TYPES)
        _CONCURRENCY_SQL = (
            f"SELECT c.recorded, c.throttled, {columns}, c.claimed_from, c.fresh "
            f"FROM durable_claim_concurrency({marks}) AS c"
        )
    with kept_cursor(connection) as cursor:
        cursor.execute(_CONCURRENCY_SQL, params)
        rows = cursor.fetchall()
    *claimed, flags = rows  # the last row is the flags'
    runs = [run_from_row(using, connection, row[2:]) for row in claimed]
    return runs, frozenset(flags[0] or ()), bool(flags[1])


def finish_concurrency(using: str, finishes: Sequence[Finish], now: datetime) -> frozenset[Any]:
    """Record ``finishes``, outcomes of runs under a concurrency limit, and free their
    slots, with ``durable_finish_concurrency``: one call for a batch;
    the ids it recorded."""
    connection = connections[using]
    params: list[Any] = [now, *_finish_arrays(finishes, connection)]
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT durable_finish_concurrency({_marks('timestamptz', *ARRAY_TYPES)})", params
        )
        return frozenset(cursor.fetchone()[0] or ())


def lock(using: str, job_name: str, kind: str, key: str) -> None:
    """``flow_keys.lock`` on PostgreSQL: the key's advisory lock until the transaction ends
    (``durable_flow_lock``), which the flow functions take too."""
    with connections[using].cursor() as cursor:
        cursor.execute("SELECT durable_flow_lock(%s, %s, %s)", [job_name, kind, key])


def _finish_arrays(finishes: Sequence[Finish], connection: Any) -> list[list[Any]]:
    """The functions' outcome parameters: ``outcome_arrays``, then each run's job name
    and concurrency key ('' for none), whose lock is taken before its outcome is
    written."""
    return [
        *outcome_arrays(finishes, connection),
        [finish.job_name for finish in finishes],
        [finish.concurrency_key or "" for finish in finishes],
    ]


def _marks(*types: str) -> str:
    """Placeholders cast to the functions' parameter types (which then need no
    guessing from the values: an array of NULLs, say)."""
    return ", ".join(f"%s::{kind}" for kind in types)


def _param_type(name: str) -> str:
    """The function's parameter type for an outcome column: its times
    are ``timestamptz[]``, everything else travels as ``text[]`` (JSON too)."""
    field = JobRun._meta.get_field(name)
    return "timestamptz[]" if isinstance(field, DateTimeField) else "text[]"


#: The types of the filter of a rolling deploy (``Executable``), the last parameters.
VERSION_TYPES = ("text[]", "text[]", "timestamptz")
#: The types of the queues and jobs paused (``Paused``), after those.
PAUSED_TYPES = ("text[]", "text[]")
#: The types of the outcome arrays, as the functions declare them (``_finish_arrays``'
#: order: the outcome columns, then the ids, lease owners, job names and keys).
ARRAY_TYPES = (
    *(_param_type(name) for name in OUTCOME_COLUMNS),
    "uuid[]",
    "text[]",
    "text[]",
    "text[]",
)
