"""The claim on PostgreSQL: one prepared statement that also records the previous
run's outcome, so a worker pays one round trip and one commit per run.

The statement is ``PREPARE``d once per connection (planning the CTE costs as much
as running it), unless ``DISABLE_SERVER_SIDE_CURSORS`` says a transaction-pooling
PgBouncer sits in between, where named statements do not survive (``statements``).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import connections
from django.db.models import JSONField
from django.db.models.base import ModelState
from django.db.models.signals import post_init, pre_init

from ...models import JobRun
from ..executable import Executable
from ..fields import InstantField
from ..paused import Paused
from . import sql
from .statements import execute_again, kept_cursor, numbered_to_named, own_commit, prepare

#: The columns a claim returns and a JobRun is built from, in model order.
FIELDS = [field for field in JobRun._meta.concrete_fields]
_COLUMNS = ", ".join(f"run.{field.column}" for field in FIELDS)
_ATTNAMES = [field.attname for field in FIELDS]
#: How ``run_from_row`` converts a column: as JSON (``JSONField`` without a decoder of
#: its own), as an instant (``InstantField``), or through the field.
_JSON, _INSTANT, _FIELD = "json", "instant", "field"


def _kind(field: Any) -> str:
    converts = type(field).from_db_value
    if converts is JSONField.from_db_value and field.decoder is None:
        return _JSON
    return _INSTANT if converts is InstantField.from_db_value else _FIELD


#: The fields whose values Django converts after loading (``from_db_value``: JSON
#: decoded, an ``InstantField``'s naive local time made aware with ``USE_TZ = False``),
#: with their positions in a claimed row and how.
_CONVERTED_AT = [
    (index, field, _kind(field))
    for index, field in enumerate(FIELDS)
    if hasattr(field, "from_db_value")
]
#: The JSON texts most runs' arguments are, made without the decoder (a new object each).
_EMPTY_JSON: dict[str, Any] = {"[]": list, "{}": dict}
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

_TYPES = ["timestamptz", "int", "text", "timestamptz", "text[]"]
#: The parameters of ``claim_versions``, after ``_TYPES`` (``Executable``).
_VERSION_TYPES = ["text[]", "text[]", "timestamptz"]
#: The parameters of ``claim_paused``, after those (``Paused``).
_PAUSED_TYPES = ["text[]", "text[]"]


def _field(name: str) -> Any:
    return JobRun._meta.get_field(name)


def _outcome_sql(connection: Any, first: int) -> tuple[str, list[str]]:
    """The CTE that records outcomes (one JSON document, an object per run: see
    ``outcome_document``; ``first``, its parameter's number), and its parameter type:
    built from ``OUTCOME_COLUMNS`` and the model's fields, so a column takes no edit
    here. Each outcome is fenced by its own lease owner."""
    qn = connection.ops.quote_name
    fields = [_field(name) for name in OUTCOME_COLUMNS]
    sets = ", ".join(f"{qn(field.column)} = o.{qn(field.column)}" for field in fields)
    record = ", ".join(f"{qn(field.column)} {field.db_type(connection)}" for field in fields)
    template = sql.sections("queries")["claim_outcomes"]
    return template.format(table="{table}", sets=sets, first=first, record=record), ["json"]


def outcome_document(finishes: Sequence[Finish], connection: Any) -> str:
    """The parameter of ``_outcome_sql``: a JSON array with an object per outcome (its
    columns' values, its run id and lease owner), which the statement reads with
    ``json_to_recordset``. One text parameter, where an array per column had psycopg
    quote each element in Python: 0.84 ms of a 32-run batch against 0.24."""
    tz = settings.USE_TZ
    columns = _outcome_columns()
    rows = []
    for finish in finishes:
        values = finish.values
        row = {
            column: json_value(field, values[name], connection, tz)
            for name, column, field in columns
        }
        row["run_id"], row["owner"] = str(finish.run_id), finish.owner
        rows.append(row)
    return json.dumps(rows, default=json_default, ensure_ascii=False, allow_nan=False)


def _outcome_columns() -> list[tuple[str, str, Any]]:
    if not _OUTCOME_COLUMNS:
        _OUTCOME_COLUMNS.extend(
            (name, _field(name).column, _field(name)) for name in OUTCOME_COLUMNS
        )
    return _OUTCOME_COLUMNS


_OUTCOME_COLUMNS: list[tuple[str, str, Any]] = []


def json_value(field: Any, value: Any, connection: Any, tz: bool) -> Any:
    """``value`` as the outcome document carries it: JSON columns as they are (JSON
    inside the document), text as it is, an aware datetime as it is (ISO 8601, with its
    offset, from ``json_default``); anything else as Django prepares it for the column."""
    if isinstance(field, JSONField):
        # None is SQL NULL, as JSONField.get_db_prep_save stores it.
        return value if field.encoder is None else json.loads(json_text(field, value) or "null")
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, datetime) and tz and value.tzinfo is not None:
        return value
    return field.get_db_prep_save(value, connection)


def json_default(value: Any) -> Any:
    """A column's value in a JSON document as PostgreSQL reads it back exactly: a
    datetime in ISO 8601, a UUID as its text, a duration in microseconds."""
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, timedelta):
        return f"{value // _MICROSECOND} microseconds"
    raise TypeError(f"a column's value of type {type(value).__name__} is not JSON")


_MICROSECOND = timedelta(microseconds=1)


def outcome_arrays(finishes: Sequence[Finish], connection: Any) -> list[list[Any]]:
    """The outcome parameters of the flow functions (``sql/schema.sql``): one array per
    outcome column (JSON as its text), then the run ids and their
    lease owners."""
    arrays: list[list[Any]] = []
    for name in OUTCOME_COLUMNS:
        field = _field(name)
        values = [finish.values[name] for finish in finishes]
        if isinstance(field, JSONField):
            arrays.append([json_text(field, value) for value in values])
        else:
            arrays.append([field.get_db_prep_save(value, connection) for value in values])
    arrays.append([finish.run_id for finish in finishes])
    arrays.append([finish.owner for finish in finishes])
    return arrays


def json_text(field: JSONField, value: Any) -> str | None:
    # None is SQL NULL, as JSONField.get_db_prep_save stores it.
    return None if value is None else json.dumps(value, cls=field.encoder)


@dataclass(frozen=True)
class Finish:
    """A run's outcome to record in the same statement as the next claim."""

    run_id: Any
    owner: str
    values: dict[str, Any]
    #: The run's job and concurrency key: the flow functions lock the key first.
    job_name: str = ""
    concurrency_key: str | None = None


@dataclass
class Claimed:
    """What the claim's statement returns."""

    runs: list[JobRun]
    #: The ids of the runs whose outcome it was given it recorded (one missing: that
    #: run's lease was lost).
    recorded: frozenset[Any]
    #: Asked with ``look_for_limited``: whether runnable runs under a flow-control limit
    #: were due (the flow claim's; None: not asked).
    limited_waiting: bool | None = None


def claim(
    using: str,
    owner: str,
    now: datetime,
    lease: timedelta,
    queues: list[str] | None,
    limit: int,
    finishes: Sequence[Finish] = (),
    look_for_limited: bool = False,
    only: Executable | None = None,
    paused: Paused | None = None,
) -> Claimed:
    """Claim up to ``limit`` runs under no limit (and record ``finishes``, each fenced
    by its owner, in the same statement); with
    ``look_for_limited``, also tell whether runs under a limit are due (an index
    probe in the same statement, so a worker asks the flow claim only then). With
    ``only``, runs of the jobs and versions it lets this worker take: another
    statement (``claim_versions``), so the usual one stays as it was; so with
    ``paused``, the queues and jobs paused (``claim_paused``)."""
    connection = connections[using]
    name, statement, types = _statement(
        connection, queues, bool(finishes), look_for_limited, only is not None, bool(paused)
    )
    params: list[Any] = [now, limit, owner, now + lease, queues or []]
    if only is not None:
        params += [*only.keys, only.overdue]
    if paused:
        params += [*paused.keys]
    if finishes:
        params.append(outcome_document(finishes, connection))
    lazy = not finishes and own_commit(connection)
    with kept_cursor(connection) as cursor:
        execute_again(connection, cursor, name, types, statement, params, lazy_commit=lazy)
        rows = cursor.fetchall()
    done = frozenset(rows[0][0] or ()) if rows and finishes else frozenset()
    runs = [run_from_row(using, connection, row[2:]) for row in rows if row[2] is not None]
    runs.sort(key=lambda run: (-run.priority, run.wake_at or now))
    return Claimed(runs, done, bool(rows[0][1]) if look_for_limited and rows else None)


def finish(using: str, finishes: Sequence[Finish], now: datetime) -> frozenset[Any]:
    """Record ``finishes`` (each fenced by its owner) in one statement, claiming
    nothing (the claim's statement with a limit of 0); the ids it recorded."""
    return claim(using, "", now, timedelta(0), None, 0, finishes).recorded


#: The parts of a claim's picks, in the claim's order (``models.by_priority``): the
#: runs above the default priority, at it, below it.
_PARTS = (("above", "> 0"), ("at", "= 0"), ("below", "< 0"))

#: (variant, finishing, looking, filtering, pausing) -> (types, body): built once per process.
_BODIES: dict[tuple[str, bool, bool, bool, bool], tuple[list[str], str]] = {}


def _statement(
    connection: Any,
    queues: list[str] | None,
    finishing: bool,
    looking: bool = False,
    filtering: bool = False,
    pausing: bool = False,
) -> tuple[str | None, str, list[str]]:
    if queues is None:
        variant = "all"
    elif len(queues) == 1:
        variant = "one"
    else:
        variant = "many"
    key = (variant, finishing, looking, filtering, pausing)
    if key not in _BODIES:
        _BODIES[key] = _body(connection, variant, finishing, looking, filtering, pausing)
    types, body = _BODIES[key]
    name = f"durable_claim_{variant}_{'f' if finishing else 'c'}{'_l' if looking else ''}"
    name += ("_v" if filtering else "") + ("_p" if pausing else "")
    if prepare(connection, name, types, body):
        return name, body, types
    return None, numbered_to_named(body, types, connection), types


def _body(
    connection: Any, variant: str, finishing: bool, looking: bool, filtering: bool, pausing: bool
) -> tuple[list[str], str]:
    table = connection.ops.quote_name(JobRun._meta.db_table)
    # An equality lets the planner walk durable_run_runnable in order; "= ANY" cannot,
    # and would sort the whole backlog on every claim.
    queue_filter = {
        "all": "",
        "one": "AND queue = ($5::text[])[1]",
        "many": "AND queue = ANY($5)",
    }[variant]
    queries = sql.sections("queries")
    types = list(_TYPES)
    if filtering:  # the worker's jobs and versions, then every live worker's (Executable)
        mine, anyone, overdue = (len(types) + n for n in (1, 2, 3))
        queue_filter += " " + queries["claim_versions"].format(
            mine=mine, anyone=anyone, overdue=overdue
        )
        types += _VERSION_TYPES
    if pausing:  # the queues and jobs paused (Paused)
        queues, jobs = len(types) + 1, len(types) + 2
        queue_filter += " " + queries["claim_paused"].format(queues=queues, jobs=jobs)
        types += _PAUSED_TYPES
    done, done_types = _outcome_sql(connection, len(types) + 1) if finishing else ("", [])
    limited = queries["claim_limited_due"] if looking else "NULL"
    body = queries["claim"].format(
        outcomes=done.format(table=table),
        picked="\nUNION ALL\n".join(
            queries["claim_picked"].format(
                table=table, queues=queue_filter, priority=priority, part=part
            )
            for part, priority in _PARTS
        ),
        table=table,
        queues=queue_filter,
        columns=_COLUMNS,
        recorded="(SELECT array_agg(id) FROM done)" if finishing else "NULL",
        limited_due=limited.format(table=table, queues=queue_filter),
    )
    return types + done_types, body


def run_from_row(using: str, connection: Any, row: tuple[Any, ...]) -> JobRun:
    values = list(row[: len(FIELDS)])
    aware = settings.USE_TZ
    for index, field, kind in _CONVERTED_AT:
        # What each field's from_db_value returns, without the call where the answer is
        # known (a tenth of a claimed run's building): NULL is None for both kinds, an
        # empty list or object is itself, and with USE_TZ psycopg loads timestamptz aware.
        value = values[index]
        if kind is _FIELD:
            values[index] = field.from_db_value(value, None, connection)
        elif value is None or (kind is _INSTANT and aware):
            continue
        elif kind is _JSON and type(value) is str and (empty := _EMPTY_JSON.get(value)):
            values[index] = empty()
        else:
            values[index] = field.from_db_value(value, None, connection)
    if pre_init.has_listeners(JobRun) or post_init.has_listeners(JobRun):
        run = JobRun.from_db(using, _ATTNAMES, values)  # Model.__init__ sends them
    else:
        # What from_db's Model.__init__ does with a full row and no signal to send, in
        # one C call: each field's value set on the instance (JobRun's fields keep
        # their values in the instance's __dict__: no field sets a descriptor of its
        # own). A fifth of a claimed run's building, and the part a woken worker pays
        # before its run starts.
        run = JobRun.__new__(JobRun)
        run.__dict__.update(zip(_ATTNAMES, values, strict=True))
        run._state = ModelState()
        run._state.adding, run._state.db = False, using
    run.claimed_from, run.claimed_fresh = row[len(FIELDS)], bool(row[len(FIELDS) + 1])
    return run
