"""How a hand-written statement runs on PostgreSQL: ``PREPARE``d once per connection
(and again when the server lost it), or sent as text behind a transaction-pooling
PgBouncer; on a cursor kept from one statement to the next; a claim's commit made lazy
when that is safe. The claim (``postgres``), the inserts (``postgres_inserts``) and the
flow claim (``postgres_flow``) are written with these."""

from __future__ import annotations

import logging
import threading
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from django.conf import settings
from django.db import DatabaseError

log = logging.getLogger("django_durable_jobs.db")

#: psycopg connection -> the names ``prepare`` made on it.
_prepared: weakref.WeakKeyDictionary[Any, set[str]] = weakref.WeakKeyDictionary()


def prepare(connection: Any, name: str, types: list[str], body: str) -> bool:
    """``PREPARE`` ``body`` as ``name`` on this connection, once; False where named
    statements cannot be used: ``DISABLE_SERVER_SIDE_CURSORS`` (PgBouncer), a
    connection that is a pooler's (``pooled``), and cursors that bind parameters on
    the server (``binds_on_server``), whose ``EXECUTE name($1, ...)`` the server
    refuses: it cannot tell an ``EXECUTE`` argument's type ("could not determine data
    type of parameter $2")."""
    if connection.settings_dict.get("DISABLE_SERVER_SIDE_CURSORS") or binds_on_server(connection):
        return False
    connection.ensure_connection()
    if pooled(connection):
        return False
    done = _prepared.get(connection.connection)
    if done is None:  # setdefault would make a set and a weak reference every call
        done = _prepared[connection.connection] = set()
    if name not in done:
        with connection.cursor() as cursor:
            cursor.execute(f"PREPARE {name}({', '.join(types)}) AS {body}")
        done.add(name)
    return True


def pooled(connection: Any) -> bool:
    """Whether ``connection`` (connected) reaches PostgreSQL through a pooler, asked
    once per connection before its first ``PREPARE``: the backend it says it is at
    connect time (``BackendKeyData``) is not the one that answers. PgBouncer makes
    that key up. In transaction pooling a named statement lives on a server
    connection that other clients get next: without ``DISABLE_SERVER_SIDE_CURSORS``,
    three enqueues in four failed ("prepared statement ... already exists") with eight
    threads behind PgBouncer 1.18. A pooler's connections send statements as text."""
    raw = connection.connection
    known = _pooled.get(raw)
    if known is None:
        known = _pooled[raw] = answered_elsewhere(raw)
        if known and connection.alias not in _told:
            _told.add(connection.alias)
            log.warning(
                "database %r is reached through a connection pooler (PgBouncer?): its "
                "statements are sent unprepared; DISABLE_SERVER_SIDE_CURSORS: True on "
                "it says so without asking (as Django asks behind transaction pooling)",
                connection.alias,
            )
    return known


def answered_elsewhere(raw: Any) -> bool:
    """Whether the backend that answers on the psycopg connection ``raw`` is not the
    one it named at connect time (``BackendKeyData``): a pooler's, which makes that
    key up. Also asked by the worker's LISTEN connection (``wakeup``)."""
    row = raw.execute("SELECT pg_backend_pid()").fetchone()
    return bool(row and row[0] != raw.info.backend_pid)


#: psycopg connection -> whether it is a pooler's (``pooled``).
_pooled: weakref.WeakKeyDictionary[Any, bool] = weakref.WeakKeyDictionary()
#: The database aliases whose pooler was logged.
_told: set[str] = set()


def run_statement(
    connection: Any, name: str, types: list[str], sql: str, params: list[Any], *, prepared: bool
) -> int:
    """Run ``sql`` (``$1``... placeholders; ``types``: their database types) as the
    statement ``name``, prepared once per connection, or as text when not ``prepared``
    or where named statements cannot be used (``prepare``); the rows it wrote."""
    with ran(connection, name, types, sql, params, prepared=prepared) as cursor:
        return int(cursor.rowcount)


@contextmanager
def ran(
    connection: Any, name: str, types: list[str], sql: str, params: list[Any], *, prepared: bool
) -> Iterator[Any]:
    """``run_statement``'s cursor once the statement ran, for one that returns rows."""
    statement: str | None = name
    if not prepared or not prepare(connection, name, types, sql):
        statement, sql = None, numbered_to_named(sql, types, connection)
    with kept_cursor(connection) as cursor:
        execute_again(connection, cursor, statement, types, sql, params)
        yield cursor


def numbered_to_named(sql: str, types: list[str], connection: Any) -> str:
    """$1..$n placeholders to named ones, for a statement sent as text (not prepared).

    A cursor that binds on the server (``binds_on_server``) sends a ``str`` or a
    ``None`` without a type, and the server guesses ``text`` where the statement does
    not say (an ``INSERT ... SELECT``'s select list): each placeholder is cast to its
    type then, without a length (``varchar(200)`` as ``varchar``: a cast would cut an
    over-long value where the column refuses it)."""
    typed = binds_on_server(connection)
    for number in range(len(types), 0, -1):
        cast = f"::{_without_length(types[number - 1])}" if typed else ""
        sql = sql.replace(f"${number}", f"%(p{number})s{cast}")
    return sql


def _without_length(type_: str) -> str:
    """``varchar(200)`` -> ``varchar``; ``numeric(10, 2)[]`` -> ``numeric[]``."""
    head, _, rest = type_.partition("(")
    return head + rest.partition(")")[2] if rest else type_


def execute_again(
    connection: Any,
    cursor: Any,
    name: str | None,
    types: list[str],
    body: str,
    params: list[Any],
    *,
    lazy_commit: bool = False,
) -> None:
    """``execute``, and when the server no longer has the statement ``prepare`` made
    (a ``DEALLOCATE ALL``: PgBouncer's session reset, psycopg's own after a rollback
    once it prepared statements itself, an operator), every statement of the
    connection is prepared again: this one at once when it is its own transaction,
    else from the next call (the caller's transaction is aborted by then). Without
    it the worker failed on every claim until it was restarted."""
    try:
        execute(cursor, name, body, params, lazy_commit=lazy_commit)
    except DatabaseError as exc:
        if name is None or getattr(exc.__cause__, "sqlstate", None) != LOST_STATEMENT:
            raise
        _prepared.pop(connection.connection, None)
        if not own_transaction(connection):
            raise
        prepare(connection, name, types, body)
        execute(cursor, name, body, params, lazy_commit=lazy_commit)


#: SQLSTATE invalid_sql_statement_name: "prepared statement ... does not exist".
LOST_STATEMENT = "26000"


def execute(
    cursor: Any, name: str | None, sql: str, params: list[Any], *, lazy_commit: bool = False
) -> None:
    """Run a statement from ``prepare``: by name, or (unprepared) as text.

    ``lazy_commit``: the statement is its own transaction and commits without waiting
    for the WAL to reach the disk (``LAZY_COMMIT``), in the same round trip."""
    prefix = LAZY_COMMIT if lazy_commit else ""
    if name is None:
        numbered = {f"p{number}": value for number, value in enumerate(params, 1)}
        cursor.execute(prefix + sql, numbered)
    else:
        cursor.execute(f"{prefix}EXECUTE {name}({', '.join(['%s'] * len(params))})", params)
    if prefix and cursor.description is None:  # psycopg 3 stands on the SET's result first
        cursor.nextset()


#: A claim that records nothing commits without waiting for the disk (one fsync less
#: between an enqueue and the run's start). Safe because losing it loses nothing: a
#: claim that a database crash forgets leaves the run queued, as it was, and the
#: worker's next write for it, fenced by the lease, is refused. Every outcome and
#: step record commits as usual, and its commit makes the claims before it durable
#: too (the WAL is written in order). Sent in the claim's own query string, which
#: PostgreSQL runs as one transaction: no extra round trip.
LAZY_COMMIT = "SET LOCAL synchronous_commit TO off; "


def own_transaction(connection: Any) -> bool:
    """Whether a statement on ``connection`` is a transaction of its own: autocommit,
    and no ``atomic()`` block open."""
    return connection.get_autocommit() and not connection.in_atomic_block


def own_commit(connection: Any) -> bool:
    """Whether a statement on ``connection`` commits on its own and may carry
    ``LAZY_COMMIT``: its own transaction, and parameters bound on the client (a
    server-side binding cursor takes one statement per query)."""
    return own_transaction(connection) and not binds_on_server(connection)


def binds_on_server(connection: Any) -> bool:
    """Whether Django's cursors on ``connection`` send the parameters apart from the
    query (``OPTIONS={"server_side_binding": True}``, as Django tests it) instead of
    writing them into it."""
    return connection.settings_dict.get("OPTIONS", {}).get("server_side_binding") is True


@contextmanager
def kept_cursor(connection: Any) -> Iterator[Any]:
    """The cursor the hot statements run on (a worker's claims, ``enqueue``'s INSERT, a
    step's fenced write: ``run_statement``), kept open on its connection from one
    statement to the next, with ``fast_timestamps``: making a cursor and its adapters
    cost an idle worker a tenth of a millisecond between a notification and its
    claim. Kept per thread and per connection (a new one after a reconnect); not kept
    while Django logs queries (``DEBUG``, ``CaptureQueriesContext``), whose cursors
    are the ones that record them. Django's wrapper still runs each statement
    (``execute_wrapper``, its errors, a broken transaction refused)."""
    if connection.queries_logged:
        with connection.cursor() as cursor:
            fast_timestamps(connection, cursor)
            yield cursor
        return
    connection.ensure_connection()
    kept: dict[str, tuple[Any, Any, Any]] = _KEPT.__dict__.setdefault("cursors", {})
    raw, zone, cursor = kept.get(connection.alias, (None, None, None))
    # The loaders a cursor got were chosen for the time zone settings of its day: a
    # changed USE_TZ or TIME_ZONE (a test's override) gets a new one.
    now_zone = (settings.USE_TZ, connection.timezone_name)
    if raw is not connection.connection or zone != now_zone or cursor.closed:
        cursor = connection.cursor()
        fast_timestamps(connection, cursor)
        kept[connection.alias] = (connection.connection, now_zone, cursor)
    yield cursor


#: This thread's kept cursors: alias -> (the psycopg connection, the time zone
#: settings it was made under, Django's cursor).
_KEPT = threading.local()


def fast_timestamps(connection: Any, cursor: Any) -> None:
    """Load ``timestamptz`` columns on this cursor with psycopg's own loader, where it
    gives what Django's gives: a claim returns a row of timestamps per run, and
    Django's loader (a Python wrapper that only sets ``tzinfo``) cost a tenth of a
    no-op run. With ``USE_TZ`` and the session in UTC (Django's default) both return
    aware datetimes in ``datetime.timezone.utc``; otherwise Django's loader stays."""
    if settings.USE_TZ and connection.timezone_name == "UTC":
        from psycopg.types.datetime import TimestamptzLoader  # the fast path needs psycopg 3

        cursor.cursor.adapters.register_loader("timestamptz", TimestamptzLoader)
