"""The database's clock: the one clock that every process agrees on.

Leases, "runnable now" and wake-ups compare times written by different processes,
often on different machines. If each wrote its own clock's time, a worker whose clock
runs two minutes ahead would take over live leases, one two minutes behind would
write leases that have already expired, and an enqueuer ahead would delay the runs it
starts. So every process tells the time of the database: its own clock, corrected by
the offset it measured to the database's clock. Functions still take ``now`` as an
argument; this is only the clock the app installs (``clock.current()``) and the
worker reads.
"""

from __future__ import annotations

import logging
import threading
import time
from datetime import UTC, datetime, timedelta
from typing import Any

from django.core.exceptions import SynchronousOnlyOperation
from django.db import DatabaseError, connections

from .. import conf
from . import dialect

log = logging.getLogger("django_durable_jobs.clock")

#: How often the offset is measured again (clocks drift, NTP steps them).
RESYNC_SECONDS = 60.0
#: After a failed measurement (the database is down), try again this soon.
RETRY_SECONDS = 5.0


class DatabaseClock:
    """``now()`` in the database's time: this process's clock plus the offset
    measured to the database's clock, measured again every minute.

    An offset no larger than the measurement's own uncertainty (half the round trip,
    plus the database's resolution) is taken as zero: it cannot be told from noise,
    and on one machine (SQLite, a local server) the clocks are the same.

    >>> DatabaseClock().now()  # doctest: +SKIP
    datetime.datetime(2026, 12, 1, 3, 4, 5, 678901, tzinfo=datetime.timezone.utc)
    """

    def __init__(self, *, using: str | None = None, every: float = RESYNC_SECONDS) -> None:
        self._using = using
        self._every = every
        self._offset = timedelta(0)
        self._due_at = 0.0  # time.monotonic() of the next measurement
        self._lock = threading.Lock()

    @property
    def offset(self) -> timedelta:
        """The database's clock minus this process's clock, as last measured."""
        return self._offset

    def now(self) -> datetime:
        if time.monotonic() >= self._due_at:
            self.measure()
        return datetime.now(UTC) + self._offset

    def measure(self) -> timedelta:
        """Measure the offset now (one query); keep the last one if that fails."""
        if not self._lock.acquire(blocking=False):
            return self._offset  # another thread is measuring: its answer is as good
        try:
            using = self._using or conf.database()
            try:
                offset, uncertainty = measure_offset(using)
            except (DatabaseError, SynchronousOnlyOperation) as exc:
                # On an event loop the ORM refuses any query: not the clock's problem, and
                # a sync enqueue() there raises SynchronousOnlyOperation itself next.
                on_loop = isinstance(exc, SynchronousOnlyOperation)
                (log.debug if on_loop else log.warning)(
                    "cannot read the database's clock (%s); keeping offset %s", exc, self._offset
                )
                self._due_at = time.monotonic() + RETRY_SECONDS
                return self._offset
            if abs(offset) <= uncertainty:
                offset = timedelta(0)
            elif abs(offset - self._offset) > uncertainty + timedelta(milliseconds=100):
                log.warning(
                    "this process's clock is %.3fs %s the database's; using the database's",
                    abs(offset.total_seconds()),
                    "behind" if offset > timedelta(0) else "ahead of",
                )
            self._offset = offset
            self._due_at = time.monotonic() + self._every
            return offset
        finally:
            self._lock.release()


def measure_offset(using: str) -> tuple[timedelta, timedelta]:
    """(the database's clock minus this process's, the uncertainty of that figure)."""
    connection = connections[using]
    chosen = dialect.of(using)
    sql = chosen.now_sql
    if sql is None:  # an unknown backend: trust this process's clock
        return timedelta(0), timedelta(0)
    connection.ensure_connection()  # so that connecting is not part of the round trip
    with connection.cursor() as cursor:
        before = datetime.now(UTC)
        cursor.execute(sql)
        after = datetime.now(UTC)
        (value,) = cursor.fetchone()
    half_trip = (after - before) / 2
    offset = _utc(value) - (before + half_trip)
    return offset, half_trip + chosen.clock_resolution


def _utc(value: Any) -> datetime:
    """The database's answer as an aware UTC datetime (MariaDB and SQLite answer naive UTC)."""
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    if not isinstance(value, datetime):
        raise DatabaseError(f"the database's clock answered {value!r}, not a time")
    if value.tzinfo is None:
        return value.replace(tzinfo=UTC)
    return value.astimezone(UTC)
