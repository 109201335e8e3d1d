"""How an idle worker learns there is work: LISTEN/NOTIFY on PostgreSQL, polling elsewhere."""

from __future__ import annotations

import logging
from typing import Any, Protocol

from django.db import connections

from .. import conf
from ..db import dialect
from ..db.postgresql import statements

CHANNEL = "durable_jobs"
log = logging.getLogger("django_durable_jobs.worker")


class Waker(Protocol):
    mode: str

    def wait(self, timeout: float) -> bool:
        """Block up to ``timeout`` seconds; True if woken by a notification."""
        ...

    def close(self) -> None: ...


class PollingWaker:
    mode = "polling"

    def __init__(self) -> None:
        import threading

        self._event = threading.Event()

    def wait(self, timeout: float) -> bool:
        woken = self._event.wait(timeout)
        self._event.clear()
        return woken

    def interrupt(self) -> None:
        self._event.set()

    def close(self) -> None:
        return None


class PostgresWaker:
    """A dedicated autocommit connection that LISTENs; falls back to a plain wait."""

    mode = "listen/notify"

    def __init__(self) -> None:
        import psycopg

        settings = connections[conf.database()].get_connection_params()
        self._params: dict[str, Any] = {
            k: v for k, v in settings.items() if k not in {"cursor_factory", "context"}
        }
        self._psycopg = psycopg
        self._conn: Any = None
        self._told = False

    def _connect(self) -> Any:
        if self._conn is None or self._conn.closed:
            self._conn = self._psycopg.connect(autocommit=True, **self._params)
            self._conn.execute(f"LISTEN {CHANNEL}")
            if statements.answered_elsewhere(self._conn) and not self._told:
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
            for _ in conn.notifies(timeout=timeout, stop_after=1):
                # Drain whatever else arrived; one wake-up is enough.
                return True
            return False
        except self._psycopg.Error as exc:
            log.warning("LISTEN connection lost (%s); reconnecting", exc)
            self.close()
            import time

            time.sleep(min(timeout, 1.0))
            return False

    def close(self) -> None:
        if self._conn is not None:
            try:
                self._conn.close()
            finally:
                self._conn = None


def make_waker() -> Waker:
    if dialect.of(conf.database()).listens:  # psycopg 3: notifies(timeout=...)
        return PostgresWaker()
    return PollingWaker()
