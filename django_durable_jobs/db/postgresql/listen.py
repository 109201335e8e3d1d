"""LISTEN on PostgreSQL (psycopg 3): how an idle worker hears of new work the moment it
commits. The triggers of ``sql/schema.sql`` NOTIFY the channel ``durable_jobs`` when
runs are enqueued or woken."""

from __future__ import annotations

import logging
import time
from typing import Any

from django.db import connections

from .statements import answered_elsewhere

CHANNEL = "durable_jobs"
log = logging.getLogger("django_durable_jobs.worker")


class Listener:
    """A dedicated autocommit connection that LISTENs; falls back to a plain wait."""

    mode = "listen/notify"

    def __init__(self, using: str) -> None:
        import psycopg

        settings = connections[using].get_connection_params()
        self._params: dict[str, Any] = {
            k: v for k, v in settings.items() if k not in {"cursor_factory", "context"}
        }
        self._psycopg = psycopg
        self._conn: Any = None
        self._told = False
        #: The ids of the events heard of ("event <id>", ``durable_jobs_published``).
        self._events: set[int] = set()

    def _connect(self) -> Any:
        if self._conn is None or self._conn.closed:
            self._conn = self._psycopg.connect(autocommit=True, **self._params)
            self._conn.execute(f"LISTEN {CHANNEL}")
            if answered_elsewhere(self._conn) and not self._told:
                self._told = True
                log.warning(
                    "the worker's LISTEN connection goes through a connection pooler "
                    "(PgBouncer?): in transaction pooling no NOTIFY reaches it, and the "
                    "worker finds new work by polling every --poll-interval"
                )
        return self._conn

    def wait(self, timeout: float) -> bool:
        try:
            conn = self._connect()
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

    def take_events(self) -> set[int]:
        """The events heard of since the last call (their runs are woken by
        ``events.wake_late``)."""
        events, self._events = self._events, set()
        return events

    def close(self) -> None:
        if self._conn is not None:
            try:
                self._conn.close()
            finally:
                self._conn = None
