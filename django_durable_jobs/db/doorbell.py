"""The doorbell: how an idle worker hears of new work where the database cannot notify
it (MariaDB/MySQL have no LISTEN/NOTIFY).

A transaction that enqueued runs, made runs runnable now or published an event (the
worker that hears it looks for the runs that parked while the publisher was open:
``event_watch.py``) rings it once, after its commit: one UPDATE of the one
``Doorbell`` row, in autocommit. An idle worker reads that row every few
milliseconds (``worker/wakeup.py``) and claims when it changed, instead of asking the
runs table for work. Ringing after the commit, not in the
transaction: a ring inside would hold the row's lock until the caller's commit and
queue every other enqueuer behind it; a worker woken before the commit would find
nothing and go back to waiting.

``dialect.of(using).wake_by`` says whether the database needs it (``"doorbell"``);
elsewhere ``ring`` does nothing.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable

from django.db import DatabaseError, connections, transaction
from django.db.models import F

from ..models import Doorbell
from . import dialect

log = logging.getLogger("django_durable_jobs.worker")


def ring(using: str) -> None:
    """Ring the doorbell when the caller's transaction commits (at once in
    autocommit), once per transaction however often it is called."""
    if dialect.of(using).wake_by != "doorbell":
        return
    connection, ringer = connections[using], _ringer(using)
    # One ring per transaction: a batch of enqueues in one atomic() rings once.
    if connection.in_atomic_block and any(e[1] is ringer for e in connection.run_on_commit):
        return
    transaction.on_commit(ringer, using=using)


def _ring(using: str) -> None:
    """One UPDATE; the row is created if it is missing (a flushed database). Never
    raises: the caller's work is committed, and an idle worker finds it at its next
    poll (``POLL_INTERVAL``) if the bell stays silent."""
    try:
        rows = Doorbell.objects.using(using).filter(pk=1)
        if not rows.update(rung=F("rung") + 1):
            first = Doorbell(pk=1, rung=1)
            Doorbell.objects.using(using).bulk_create([first], ignore_conflicts=True)
    except DatabaseError as exc:
        log.warning("the doorbell of idle workers was not rung (%s); they poll", exc)


#: One callable per alias, so that a transaction's pending ring is recognised.
_RINGERS: dict[str, Callable[[], None]] = {}


def _ringer(using: str) -> Callable[[], None]:
    ringer = _RINGERS.get(using)
    if ringer is None:
        ringer = _RINGERS[using] = functools.partial(_ring, using)
    return ringer


#: What an idle worker reads (``read``): the row, by primary key.
READ_SQL = "SELECT rung FROM {table} WHERE id = 1"


def read_sql(using: str) -> str:
    """The statement that reads the counter, for a raw cursor of ``using``."""
    table = connections[using].ops.quote_name(Doorbell._meta.db_table)
    return READ_SQL.format(table=table)
