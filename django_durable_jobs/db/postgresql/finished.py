"""Hearing runs finish on PostgreSQL (psycopg 3), for ``JobRun.wait``: one LISTEN
connection per process, on a thread of its own, whatever the number of waiting calls.

The trigger ``durable_jobs_finished`` (``sql/schema.sql``) sends a run's id on the
channel ``durable_jobs_finished`` when the run finishes, on commit. Each waiting call
subscribes a callback for its run's id before it first reads the run (so no finish
falls between its read and its wait); the thread calls the callbacks of the ids it
hears. After a lost connection every callback is called (notifications sent while no
one listened are lost: each waiting call reads its run again). The thread and its
connection end once no call has waited for ``IDLE`` seconds.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from django.db import connections

from ... import conf
from .statements import answered_elsewhere

CHANNEL = "durable_jobs_finished"
APPLICATION_NAME = "django_durable_jobs: JobRun.wait"
#: Seconds without a waiting call after which the thread closes its connection.
IDLE = 30.0
#: How long a first subscriber waits for the connection before it polls instead.
CONNECT_WITHIN = 5.0

log = logging.getLogger("django_durable_jobs.results")

Callback = Callable[[], None]


class FinishWatch:
    """The process's listener for one database alias (``watch(using)``)."""

    def __init__(self, using: str) -> None:
        self.using = using
        self._lock = threading.Lock()
        self._callbacks: dict[str, set[Callback]] = {}
        self._thread: threading.Thread | None = None
        self._listening = threading.Event()
        self._pooled = False
        self._stopping = False

    def subscribe(self, run_id: Any, callback: Callback) -> Callable[[], None] | None:
        """Call ``callback`` (from the listener's thread) when the run finishes, until
        the returned function is called; None if this process cannot listen (the
        caller polls): no connection within ``CONNECT_WITHIN``, or a pooler's."""
        key = str(run_id)
        with self._lock:
            if self._pooled:
                return None
            self._callbacks.setdefault(key, set()).add(callback)
            if self._thread is None:
                self._listening.clear()
                self._thread = threading.Thread(
                    target=self._serve, name="durable-jobs-finished", daemon=True
                )
                self._thread.start()

        def unsubscribe() -> None:
            with self._lock:
                left = self._callbacks.get(key)
                if left is not None:
                    left.discard(callback)
                    if not left:
                        del self._callbacks[key]

        if not self._listening.wait(CONNECT_WITHIN) or self._pooled:
            unsubscribe()
            return None
        return unsubscribe

    def _serve(self) -> None:
        idle_since: float | None = None
        conn: Any = None
        while True:
            with self._lock:
                if self._callbacks:
                    idle_since = None
                elif idle_since is None:
                    idle_since = time.monotonic()
                idle = idle_since is not None and time.monotonic() - idle_since > IDLE
                if self._pooled or self._stopping or idle:
                    self._thread = None
                    self._listening.clear()
                    _close(conn)
                    return
            try:
                if conn is None or conn.closed:
                    conn = self._connect()
                    if conn is None:  # a pooler's: the loop ends above
                        continue
                for notice in conn.notifies(timeout=1.0):
                    self._call(notice.payload)
            except Exception as exc:  # a lost connection: listen again, re-read every run
                log.warning("the LISTEN connection of JobRun.wait was lost (%s)", exc)
                self._listening.clear()
                _close(conn)
                conn = None
                self._call_all()
                time.sleep(0.5)

    def stop(self) -> None:
        """End the thread and close its connection now (tests: before the test database
        is dropped); waiting calls poll meanwhile, and a later one starts it again."""
        with self._lock:
            thread, self._stopping = self._thread, True
        if thread is not None:
            thread.join()
        with self._lock:
            self._stopping = False

    def _connect(self) -> Any:
        import psycopg

        alias = conf.listen_database(self.using)
        settings = connections[alias].get_connection_params()
        params = {k: v for k, v in settings.items() if k not in {"cursor_factory", "context"}}
        # Named, so that an operator sees what the connection is for (pg_stat_activity).
        params["application_name"] = APPLICATION_NAME
        conn = psycopg.connect(autocommit=True, **params)
        if answered_elsewhere(conn):
            # Transaction pooling delivers no NOTIFY, and a LISTEN would stay on a server
            # connection the pooler lends to others: the waiting calls poll instead.
            log.warning(
                "JobRun.wait: the database connection (%r) goes through a pooler "
                "(PgBouncer?); waiting calls poll instead of listening "
                '(DURABLE_JOBS["LISTEN_DATABASE"] names a direct connection to listen on)',
                alias,
            )
            self._pooled = True
            self._listening.set()
            _close(conn)
            return None
        conn.execute(f"LISTEN {CHANNEL}")
        self._listening.set()
        self._call_all()  # a reconnect: whatever finished meanwhile is read again
        return conn

    def _call(self, run_id: str) -> None:
        with self._lock:
            callbacks = list(self._callbacks.get(run_id, ()))
        for callback in callbacks:
            callback()

    def _call_all(self) -> None:
        with self._lock:
            callbacks = [c for callbacks in self._callbacks.values() for c in callbacks]
        for callback in callbacks:
            callback()


def _close(conn: Any) -> None:
    if conn is not None:
        try:
            conn.close()
        except Exception:
            log.debug("closing the LISTEN connection failed", exc_info=True)


_WATCHES: dict[str, FinishWatch] = {}
_WATCHES_LOCK = threading.Lock()


def watch(using: str) -> FinishWatch:
    """The process's one ``FinishWatch`` of ``using``."""
    with _WATCHES_LOCK:
        found = _WATCHES.get(using)
        if found is None:
            found = _WATCHES[using] = FinishWatch(using)
        return found


def stop_all() -> None:
    """Stop every listener of this process (``FinishWatch.stop``)."""
    with _WATCHES_LOCK:
        watches = list(_WATCHES.values())
    for found in watches:
        found.stop()
