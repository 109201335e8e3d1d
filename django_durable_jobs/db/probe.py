"""Whether anything is due, asked cheaply: the poll of an idle worker.

Where idle workers poll (SQLite, MariaDB/MySQL, psycopg2), each poll was a whole
claim: Django built and compiled the flow claim's and the claim's querysets every
``POLL_INTERVAL`` to find, most of the time, nothing (an idle worker polling every
0.1 s used 4.5 % of a core on MariaDB, 2.4 % on SQLite; now 0.7 % and 0.6 %). After a
claim that took nothing, the worker asks this first: one statement, compiled once
per database and queue list, whose only changing parameter is the time. Something
due (a run of another queue is not): the full claim, as before.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from django.db import connections

from ..models import JobRun, by_priority, in_turn
from .paused import Paused

#: A time no run is due at, to find the time's place among the compiled parameters.
_MARK = datetime(2999, 12, 31, 23, 59, 58, tzinfo=UTC)

#: (database alias, queues, pauses) -> the statement, its parameters, the time's places
#: among them; None where the time could not be told apart (then every poll claims).
_COMPILED: dict[
    tuple[str, tuple[str, ...] | None, Paused | None], tuple[str, list[Any], list[int]] | None
] = {}


def any_due(
    using: str, now: datetime, queues: Sequence[str] | None, paused: Paused | None = None
) -> bool:
    """Whether ``JobRun.objects.runnable(now, queues)`` has a run: what a claim at
    ``now`` would look at (under a limit or not); with ``paused``, none of a paused
    queue or job (their due runs would make every poll a whole claim)."""
    bound = statement(using, now, queues, paused)
    if bound is None:
        return True
    with connections[using].cursor() as cursor:
        cursor.execute(*bound)
        return cursor.fetchone() is not None


def statement(
    using: str, now: datetime, queues: Sequence[str] | None, paused: Paused | None = None
) -> tuple[str, list[Any]] | None:
    """``any_due``'s SQL and its parameters at ``now``; None where the time could not be
    told apart among the compiled parameters (then every poll claims)."""
    key = (using, None if queues is None else tuple(queues), paused or None)
    if key not in _COMPILED:
        _COMPILED[key] = _compile(using, queues, paused or None)
    compiled = _COMPILED[key]
    if compiled is None:
        return None
    sql, params, places = compiled
    params = [*params]
    at = _adapted(using, now)
    for place in places:
        params[place] = at
    return sql, params


def _compile(
    using: str, queues: Sequence[str] | None, paused: Paused | None
) -> tuple[str, list[Any], list[int]] | None:
    runnable = JobRun.objects.using(using).runnable(_MARK, queues)
    if paused is not None:
        runnable = runnable.filter(paused.q())
    pks = runnable.values_list("pk")
    if not connections[using].features.supports_partial_indexes:
        # Unordered there: the claim's index (status, queue, wake time, priority:
        # ``JobRun``'s indexes) gives the due runs as a range.
        sql, params = pks.order_by()[:1].query.get_compiler(using).as_sql()
        parts = 1
    else:
        # Read as the claim reads, a priority range at a time (``models.in_turn``):
        # at the default priority the read stops at the first parked run. One
        # statement, ordered and unordered alike, had PostgreSQL read the whole table
        # (it expected a due run among the first rows: most runnable runs are the
        # queue's parked ones), 400 ms at 2 million runs; then, in the claim's order,
        # every parked run of the queue (30-40 ms behind a million), at every poll.
        # Each part is ordered in a subquery of its own: as EXISTS, PostgreSQL dropped
        # the order and read a part by a table scan.
        sql, params = in_turn(pks, 1)
        parts = len(by_priority(pks))
    mark = _adapted(using, _MARK)
    places = [index for index, value in enumerate(params) if value == mark]
    return (sql, list(params), places) if len(places) == parts else None


def _adapted(using: str, when: datetime) -> Any:
    """``when`` as Django sends it for ``wake_at__lte`` on this database."""
    field = JobRun._meta.get_field("wake_at")
    return field.get_db_prep_value(field.get_prep_value(when), connections[using], prepared=True)
