"""Inserts on PostgreSQL that Django would build row by row: the runs of one
``enqueue`` (a prepared statement) or ``enqueue_many`` (a JSON array), and the step
records that a batch of async runs reached together (fenced, a JSON array)."""

from __future__ import annotations

import json
import uuid
import weakref
from collections.abc import Iterator, Sequence
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import connections
from django.db.models import (
    CharField,
    DateTimeField,
    IntegerField,
    JSONField,
    TextField,
    UUIDField,
)

from ...engine.serialization import Arguments
from ...models import JobRun, StepRecord
from . import sql
from .claims import FIELDS, json_default, json_text, json_value
from .statements import ran, run_statement


def insert_run(using: str, run: JobRun, arguments: Arguments | None = None) -> None:
    """``run.save(force_insert=True)`` in one prepared statement: planning a 30-column
    INSERT and building Django's SQL for it cost more than running it (1.2-1.6 ms
    against 0.9-1.0 ms a run on the benchmark machine). Like ``bulk_create``, it sends
    no ``pre_save``/``post_save``; ``run_enqueued`` is the signal of a new run.
    ``arguments``: the run's arguments as checked, whose JSON text is sent as it is
    instead of being encoded a second time."""
    connection = connections[using]
    statement, types = _run_insert(connection)
    document = run_document(run, arguments, connection)
    connection.ensure_connection()
    # A connection's first run is sent as text: with Django's default CONN_MAX_AGE = 0
    # a request's connection often enqueues once, and a PREPARE would be a round trip
    # more. From its second on, the prepared statement.
    again = connection.connection in _INSERTED
    _INSERTED[connection.connection] = True
    run_statement(connection, RUN_INSERT, types, statement, [document], prepared=again)
    run._state.adding = False
    run._state.db = using


def run_document(run: JobRun, arguments: Arguments | None, connection: Any) -> str:
    """``insert_run``'s parameter: a JSON object of the run's columns, each value as
    Django prepares it for its column (``_document_fields`` says where that is the
    value itself), JSON columns inside the document, the arguments' checked text
    written in as it is. One text parameter, where one per column had psycopg's
    client-side cursor write each into the ``EXECUTE`` in Python: 16 us a run against
    49 (the benchmark's no-op, on the benchmark machine)."""
    tz = settings.USE_TZ
    texts = (
        {} if arguments is None else {"args": arguments.args_json, "kwargs": arguments.kwargs_json}
    )
    values: dict[str, Any] = {}
    written = []
    state = run.__dict__  # a new run has every field's value there
    for field, attname, column, kind in _document_fields():
        value = state[attname] if attname in state else getattr(run, attname)
        exact = type(value)
        if attname in texts:
            written.append(f'"{column}":{texts[attname]}')
        elif value is None:
            values[column] = None
        elif (kind is _TEXT and exact is str) or (kind is _INT and exact is int):
            values[column] = value  # what get_db_prep_save returns for it
        elif kind is _UUID and exact is uuid.UUID:
            values[column] = str(value)
        elif kind is _INSTANT and exact is datetime and tz and value.tzinfo is not None:
            values[column] = value.isoformat()
        elif kind is _JSON:
            values[column] = json_value(field, value, connection, tz)
        else:  # json_default writes the UUIDs, datetimes and durations
            values[column] = field.get_db_prep_save(value, connection)
    document = _RUN_ENCODER.encode(values)
    if not written:
        return document
    return document[:-1] + "," + ",".join(written) + "}"


def _document_fields() -> list[tuple[Any, str, str, str]]:
    """Each field of ``FIELDS``, its attribute and column, and how ``run_document``
    writes its value when it is of the exact type Django's ``get_db_prep_save`` returns
    unchanged on PostgreSQL (``_kinds``; an integer for an integer field, which Django
    only wraps for psycopg): as it is, a UUID as its text, an aware datetime in ISO
    8601; any other value through Django."""
    if not _DOCUMENT_FIELDS:
        for field in FIELDS:
            kinds = _kinds(field)
            if isinstance(field, JSONField):
                kind = _JSON
            elif isinstance(field, IntegerField):
                kind = _INT
            elif kinds == (str,):
                kind = _TEXT
            elif kinds == (uuid.UUID,):
                kind = _UUID
            elif kinds == (datetime,):
                kind = _INSTANT
            else:
                kind = ""
            _DOCUMENT_FIELDS.append((field, field.attname, str(field.column), kind))
    return _DOCUMENT_FIELDS


_DOCUMENT_FIELDS: list[tuple[Any, str, str, str]] = []
_TEXT, _INT, _UUID, _INSTANT, _JSON = "text", "int", "uuid", "instant", "json"


#: ``run_document``'s encoder, made once (``json.dumps`` with options makes one a call).
_RUN_ENCODER = json.JSONEncoder(
    default=json_default, ensure_ascii=False, allow_nan=False, separators=(",", ":")
)


def _kinds(field: Any) -> tuple[type, ...]:
    """The exact types of the values Django's ``get_db_prep_save`` returns unchanged
    for ``field`` on PostgreSQL: a ``str`` for a text column, a ``UUID``, an aware
    datetime (with ``USE_TZ``; ``_param`` checks). Anything else (JSON, integers, which
    psycopg 3 gets wrapped, a ``str`` subclass such as a ``TextChoices`` member, a
    naive datetime) goes through Django."""
    if isinstance(field, (CharField, TextField)):
        return (str,)
    if isinstance(field, UUIDField):
        return (uuid.UUID,)
    if isinstance(field, DateTimeField):
        return (datetime,)
    return ()


def prepared_params(values: Sequence[tuple[Any, Any]], connection: Any) -> list[Any]:
    """The parameters of a prepared statement (whose parameters have their types) for
    ``values``, each a model field and its value: a value Django would not change as it
    is (``_param``), JSON as its text (the statement's ``jsonb`` parameter reads it),
    the rest through Django. psycopg quotes Django's JSON and UUID wrappers in Python:
    a fenced step write's parameters cost 85-91 us that way, 52-55 us this way."""
    tz = settings.USE_TZ
    params = []
    for field, value in values:
        kinds = _KINDS.get(field)
        if kinds is None:
            kinds = _KINDS[field] = _prepared_kinds(field)
        if isinstance(field, JSONField):
            params.append(json_text(field, value))
        else:
            params.append(_param(field, kinds, value, connection, tz))
    return params


def _prepared_kinds(field: Any) -> tuple[type, ...]:
    """``_kinds``, and for a ``uuid`` column (a run's id, a step's run) also a ``str``:
    the engine holds run ids as text, and the prepared statement's ``uuid`` parameter
    reads the text itself. Through Django each became a ``UUID`` and psycopg's Python
    dumper made it text again, twice a step write (4 % of a ten-step run's worker CPU).
    A malformed one is refused by the database (``DataError``) instead of by Django."""
    target = field.target_field if field.is_relation else field
    if isinstance(target, UUIDField):
        return (uuid.UUID, str)
    return _kinds(field)


#: field -> ``_prepared_kinds(field)``, for ``prepared_params``.
_KINDS: dict[Any, tuple[type, ...]] = {}


def _param(field: Any, kinds: tuple[type, ...], value: Any, connection: Any, tz: bool) -> Any:
    kind = type(value)
    if value is None or (kind in kinds and (kind is not datetime or (tz and value.tzinfo))):
        return value  # what get_db_prep_save returns for it (JSON's None included)
    return field.get_db_prep_save(value, connection)


#: The prepared statement of ``insert_run``.
RUN_INSERT = "durable_run_insert"
#: The connections (psycopg's) that inserted a run already.
_INSERTED: weakref.WeakKeyDictionary[Any, bool] = weakref.WeakKeyDictionary()
#: database alias -> the single-run INSERT and its parameter's type.
_RUN_INSERTS: dict[str, tuple[str, list[str]]] = {}


def _run_insert(connection: Any) -> tuple[str, list[str]]:
    if connection.alias not in _RUN_INSERTS:
        qn = connection.ops.quote_name
        columns = ", ".join(qn(field.column) for field in FIELDS)
        record = ", ".join(f"{qn(field.column)} {field.db_type(connection)}" for field in FIELDS)
        insert = sql.sections("queries")["insert_run"]
        _RUN_INSERTS[connection.alias] = (
            insert.format(table=qn(JobRun._meta.db_table), columns=columns, record=record),
            ["json"],
        )
    return _RUN_INSERTS[connection.alias]


#: What differs between the runs of one ``enqueue_many`` call, sent in one JSON array
#: of ``[id, args, kwargs, wake_at]``, the wake time in microseconds after the batch's
#: first run's; every other column is the same for the whole call and is sent once.
PER_RUN = ("id", "args", "kwargs", "wake_at")
#: How the SELECT reads each of ``PER_RUN`` from the array's element ``r.call``; the
#: first run's wake time is a parameter.
_FROM_CALL = {
    "id": "(r.call->>0)::uuid",
    "args": "r.call->1",
    "kwargs": "r.call->2",
    "wake_at": "%s::timestamptz + (r.call->>3)::bigint * interval '1 microsecond'",
}
#: At most about this many characters of JSON a statement (at most 4 bytes each: under
#: the 256 MB that PostgreSQL's ``jsonb`` holds):
#: a batch of large arguments is cut before ``batch_size`` runs.
BATCH_BYTES = 64 * 1024 * 1024
_MICROSECOND = timedelta(microseconds=1)


def insert_many_sql(connection: Any) -> tuple[str, list[Any]]:
    """The INSERT of ``insert_runs`` and the fields whose values are its parameters, in
    order (the wake time's is the batch's first run's), before the JSON array: every
    concrete field of ``JobRun``, from ``_meta``, so a new column takes no edit here
    (its value is the first run's, usually the field's default)."""
    qn = connection.ops.quote_name
    values = [_FROM_CALL.get(field.attname, f"%s::{field.db_type(connection)}") for field in FIELDS]
    statement = sql.sections("queries")["insert_runs"].format(
        table=qn(JobRun._meta.db_table),
        columns=", ".join(qn(field.column) for field in FIELDS),
        values=", ".join(values),
    )
    return statement, [field for field in FIELDS if field.attname not in PER_RUN[:3]]


def insert_runs(
    using: str, runs: list[JobRun], batch_size: int, arguments: Sequence[Arguments] | None = None
) -> None:
    """``bulk_create`` for queued runs of one job: what differs between them in one
    JSON array the server reads (``jsonb_array_elements``), every other column once.
    Building Django's per-row SQL, then psycopg's arrays of ids, texts and datetimes,
    cost most of the time; the rows cost the database little. ``arguments``: each
    run's arguments as checked, whose JSON text is sent as it is. The runs' wake times
    are all set or all None."""
    connection = connections[using]
    statement, fields = insert_many_sql(connection)
    with connection.cursor() as cursor:
        for start, calls in _batches(runs, batch_size, arguments):
            first = runs[start]
            # One enqueue_many call has one caller, hence one trace context.
            params = [
                field.get_db_prep_save(getattr(first, field.attname), connection)
                for field in fields
            ]
            params.append(calls)
            cursor.execute(statement, params)
    for run in runs:
        run._state.adding = False
        run._state.db = using


def _batches(
    runs: list[JobRun], batch_size: int, arguments: Sequence[Arguments] | None
) -> Iterator[tuple[int, str]]:
    """(the index of its first run, the JSON array) of each batch of ``runs``: at most
    ``batch_size`` runs and about ``BATCH_BYTES`` of JSON each."""
    start, size, calls = 0, 0, []
    for index, run in enumerate(runs):
        if arguments is None:
            args, kwargs = (
                json.dumps(run.args, ensure_ascii=False),
                json.dumps(run.kwargs, ensure_ascii=False),
            )
        else:
            args, kwargs = arguments[index].args_json, arguments[index].kwargs_json
        base, wake_at = runs[start].wake_at, run.wake_at
        if wake_at is None:
            later: object = "null"
        elif base is None:
            raise ValueError("insert_runs: the runs' wake times must be all set or all None")
        else:
            later = (wake_at - base) // _MICROSECOND
        call = f'["{run.id}",{args},{kwargs},{later}]'
        calls.append(call)
        size += len(call)
        if len(calls) >= batch_size or size >= BATCH_BYTES or index == len(runs) - 1:
            yield start, "[" + ",".join(calls) + "]"
            start, size, calls = index + 1, 0, []


#: (database alias, the columns written) -> the batched fenced step INSERT: built once.
_STEP_INSERTS: dict[tuple[str, tuple[str, ...]], tuple[list[Any], str, str]] = {}


def insert_steps(
    using: str, names: tuple[str, ...], rows: Sequence[Sequence[Any]], owners: Sequence[str]
) -> set[tuple[str, str]]:
    """Insert step records (``names``: their fields, ``run`` and ``name`` first; a row
    of values each), each only while ``owners[i]`` holds its run's lease and the run is
    running, in one ``INSERT ... SELECT FROM json_to_recordset`` (one commit for a batch
    of async runs' steps), prepared once per connection (planning it took as long as
    running it); the (run id, step name) of the rows written."""
    connection = connections[using]
    key = (connection.alias, names)
    if key not in _STEP_INSERTS:
        qn = connection.ops.quote_name
        fields: list[Any] = [StepRecord._meta.get_field(name) for name in names]
        columns = [qn(str(field.column)) for field in fields]
        record = ", ".join(
            f"{column} {field.db_type(connection)}"
            for column, field in zip(columns, fields, strict=True)
        )
        _STEP_INSERTS[key] = (
            fields,
            f"durable_insert_steps_{len(_STEP_INSERTS)}",
            sql.sections("queries")["insert_steps"].format(
                steps=qn(StepRecord._meta.db_table),
                table=qn(JobRun._meta.db_table),
                columns=", ".join(columns),
                values=", ".join(f"u.{column}" for column in columns),
                record=record,
                run=columns[0],
                name=columns[1],
            ),
        )
    fields, label, body = _STEP_INSERTS[key]
    document = step_document(fields, rows, owners, connection)
    with ran(connection, label, ["json"], body, [document], prepared=True) as cursor:
        return {(str(run_id), step) for run_id, step in cursor.fetchall()}


def step_document(
    fields: Sequence[Any], rows: Sequence[Sequence[Any]], owners: Sequence[str], connection: Any
) -> str:
    """``insert_steps``' parameter: a JSON array with an object per record (its columns'
    values, as ``outcome_document`` writes them, and its owner). One text parameter,
    where an array per column had psycopg quote each element in Python (a client-side
    cursor's arrays: 8 % of the worker's CPU with 1,000 async runs in flight)."""
    tz = settings.USE_TZ
    columns = [(str(field.column), field) for field in fields]
    records = []
    for row, owner in zip(rows, owners, strict=True):
        record = {
            column: json_value(field, value, connection, tz)
            for (column, field), value in zip(columns, row, strict=True)
        }
        record["owner"] = owner
        records.append(record)
    return json.dumps(records, default=json_default, ensure_ascii=False, allow_nan=False)
