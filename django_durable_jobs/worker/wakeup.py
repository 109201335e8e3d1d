"""How an idle worker learns there is work: LISTEN/NOTIFY on PostgreSQL; elsewhere a
short poll of something tiny that changes when there may be work (SQLite's ``PRAGMA
data_version``, MariaDB's doorbell row), never of the runs table; the claim itself
every ``POLL_INTERVAL`` on any other database. The dialect chooses
(``Dialect.wake_by``). Where the publishers leave the pass after their commit to the
workers (``Dialect.late_wake``), the waker also says which events were published
(``take_events``): the NOTIFY names them, or the doorbell says to look."""

from __future__ import annotations

import contextlib
import logging
import time
from typing import Any, Protocol

from django.db import DatabaseError, connections

from .. import conf
from ..db import dialect, doorbell
from ..db.event_watch import EventWatch
from ..db.postgresql.listen import Listener
from ..engine.bell import Bell

log = logging.getLogger("django_durable_jobs.worker")

#: How often a short-polling worker looks (seconds): the wake-up waits half of it on
#: average. Each look is one read of a counter on a connection of its own.
TICK = 0.02


class Waker(Protocol):
    mode: str

    def wait(self, timeout: float) -> bool:
        """Block up to ``timeout`` seconds; True if woken by a notification."""
        ...

    def close(self) -> None: ...


class PollingWaker:
    mode = "polling"

    def __init__(self) -> None:
        self._bell = Bell()

    def wait(self, timeout: float) -> bool:
        return self._bell.wait(timeout)

    def interrupt(self) -> None:
        """End the wait (a stop signal's handler: ``engine/bell.py``)."""
        self._bell.ring()

    def close(self) -> None:
        return None


class CounterWaker(PollingWaker):
    """Looks every ``TICK`` at a counter that changes when there may be work: SQLite's
    ``PRAGMA data_version`` (it changes whenever another connection commits: a false
    alarm costs one empty claim) or the doorbell row (``db/doorbell.py``). The value
    is compared with the last one read, never re-read at the start of a wait: a change
    between the worker's last claim and its wait still wakes it.

    A connection of its own, in autocommit (each read sees the latest commit; on
    SQLite the counter counts the commits of other connections). After a database
    error it reconnects on the next look; meanwhile it waits as ``PollingWaker``."""

    def __init__(self, using: str, sql: str, mode: str) -> None:
        super().__init__()
        self.mode = mode
        self._using = using
        self._sql = sql
        self._connection: Any = None
        self._cursor: Any = None
        self._last = self._read()

    def _read(self) -> Any:
        try:
            if self._connection is None:
                self._connection = connections.create_connection(self._using)
                self._connection.ensure_connection()
                # The driver's own cursor, kept: Django's wrapper costs more than the read.
                self._cursor = self._connection.connection.cursor()
            with self._connection.wrap_database_errors:
                self._cursor.execute(self._sql)
                row = self._cursor.fetchone()
            return row[0] if row else None
        except DatabaseError as exc:
            log.warning("the worker's wake-up read failed (%s); reconnecting", exc)
            self.close()
            return None

    def wait(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while (left := deadline - time.monotonic()) > 0:
            if self._bell.wait(min(TICK, left)):
                return True
            value = self._read()
            if value is not None and value != self._last:
                self._last = value
                return True
        return False

    def close(self) -> None:
        connection, self._connection, self._cursor = self._connection, None, None
        if connection is not None:
            with contextlib.suppress(DatabaseError):
                connection.close()


class DoorbellWaker(CounterWaker):
    """MariaDB/MySQL: the doorbell, which a publisher rings after its commit, and the
    events committed since the worker last looked (``EventWatch``), asked for after a
    ring on the worker's main connection (``take_events``, between claims)."""

    def __init__(self, using: str) -> None:
        # The watch before the counter: an event committed in between is found by the
        # first look, which comes at the first idle whatever the counter says.
        self._watch = self._start_watch(using)
        self._rung = True
        super().__init__(using, doorbell.read_sql(using), "doorbell")

    @staticmethod
    def _start_watch(using: str) -> EventWatch | None:
        try:
            return EventWatch(using, time.monotonic())
        except DatabaseError as exc:  # the worker starts anyway, and looks when idle
            log.warning("the worker's watch of new events did not start (%s)", exc)
            return None

    def wait(self, timeout: float) -> bool:
        woken = super().wait(timeout)
        self._rung = self._rung or woken
        return woken

    def take_events(self) -> list[int]:
        """The events committed since the last look, if the bell rang since; it does
        not raise (an idle worker calls it): after a database error it looks again at
        the next idle."""
        if not self._rung:
            return []
        try:
            if self._watch is None:  # from the newest event now: none heard of yet
                self._watch = EventWatch(self._using, time.monotonic())
            events = self._watch.look(time.monotonic())
        except DatabaseError as exc:
            log.warning("the worker's look for new events failed (%s); again when idle", exc)
            return []
        self._rung = False
        return events


def make_waker() -> Waker:
    using = conf.database()
    wake_by = dialect.of(using).wake_by
    if wake_by == "listen":  # psycopg 3: notifies(timeout=...)
        listener = Listener(using)
        listener.start()
        return listener
    if wake_by == "data_version":
        return CounterWaker(using, "PRAGMA data_version", "data_version")
    if wake_by == "doorbell":
        return DoorbellWaker(using)
    return PollingWaker()


def take_events(waker: Waker) -> list[int]:
    """The ids of the events the waker heard of since it was last asked (LISTEN, the
    doorbell)."""
    take = getattr(waker, "take_events", None)
    return list(take()) if take is not None else []
