"""LISTEN on PostgreSQL (psycopg 3): how an idle worker hears of new work the moment it
commits. The triggers of ``sql/schema.sql`` NOTIFY the channel ``durable_jobs`` when
runs are enqueued or woken.

The connection takes the settings of ``LISTEN_DATABASE`` when it is set (a direct
connection beside a transaction-pooling PgBouncer). Through a pooler no NOTIFY arrives,
and a ``LISTEN`` would stay on a server connection that the pooler lends to others: the
connection asks which backend answers before it listens, and a pooler's is closed; the
worker then polls every ``POLL_INTERVAL``."""

from __future__ import annotations

import logging
import time
from typing import Any

from django.db import connections

from ... import conf
from ...engine.bell import Bell
from .statements import answered_elsewhere

CHANNEL = "durable_jobs"
#: Named, so that an operator sees what the connection is for (pg_stat_activity).
APPLICATION_NAME = "django_durable_jobs: worker wake-up"
log = logging.getLogger("django_durable_jobs.worker")


class Listener:
    """A dedicated autocommit connection that LISTENs; falls back to a plain wait."""

    mode = "listen/notify"

    def __init__(self, using: str) -> None:
        import psycopg

        self.using = conf.listen_database(using)
        settings = connections[self.using].get_connection_params()
        self._params: dict[str, Any] = {
            k: v for k, v in settings.items() if k not in {"cursor_factory", "context"}
        }
        self._params["application_name"] = APPLICATION_NAME
        self._psycopg = psycopg
        self._conn: Any = None
        #: Set when the connection turned out to be a pooler's: a plain wait from then on.
        self._pooled = False
        self._woken = Bell()
        #: The ids of the events heard of ("event <id>", ``durable_jobs_published``).
        self._events: set[int] = set()

    def start(self) -> None:
        """Connect now, so that the worker's start line says how it is woken; a failure
        is retried by the first wait."""
        try:
            self._connect()
        except self._psycopg.Error as exc:
            log.warning("LISTEN connection failed (%s); retrying when idle", exc)
            self.close()

    def _connect(self) -> Any:
        if self._conn is None or self._conn.closed:
            conn = self._psycopg.connect(autocommit=True, **self._params)
            if answered_elsewhere(conn):
                conn.close()
                self._pooled, self.mode = True, "polling"
                log.warning(
                    "the worker's LISTEN connection goes through a connection pooler "
                    "(PgBouncer?) on database %r: in transaction pooling no NOTIFY reaches it, "
                    "and the worker finds new work by polling every --poll-interval; "
                    'DURABLE_JOBS["LISTEN_DATABASE"] names a direct connection to listen on',
                    self.using,
                )
                return None
            conn.execute(f"LISTEN {CHANNEL}")
            self._conn = conn
        return self._conn

    def wait(self, timeout: float) -> bool:
        if self._pooled:
            return self._woken.wait(timeout)
        try:
            conn = self._connect()
            if conn is None:
                return self.wait(timeout)
            heard = [n.payload for n in conn.notifies(timeout=timeout, stop_after=1)]
            if heard:
                # Drain whatever else has arrived: one wake-up is enough.
                heard += [n.payload for n in conn.notifies(timeout=0.0)]
            for payload in heard:
                if payload.startswith("event "):
                    self._events.add(int(payload.removeprefix("event ")))
            return bool(heard)
        except self._psycopg.Error as exc:
            log.warning("LISTEN connection lost (%s); reconnecting", exc)
            self.close()

            time.sleep(min(timeout, 1.0))
            return False

    def interrupt(self) -> None:
        """End a polling wait at once (a stopping worker); a LISTEN wait ends within its
        timeout. Safe in a stop signal's handler (``engine/bell.py``)."""
        self._woken.ring()

    def take_events(self) -> set[int]:
        """The events heard of since the last call (their runs are woken by
        ``waking.wake_late``)."""
        events, self._events = self._events, set()
        return events

    def close(self) -> None:
        if self._conn is not None:
            try:
                self._conn.close()
            finally:
                self._conn = None
