"""How an idle worker learns there is work: LISTEN/NOTIFY on PostgreSQL, polling elsewhere."""

from __future__ import annotations

import logging
from typing import Protocol

from .. import conf
from ..db import dialect
from ..db.postgresql.listen import Listener

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


def make_waker() -> Waker:
    if dialect.of(conf.database()).listens:  # psycopg 3: notifies(timeout=...)
        return Listener(conf.database())
    return PollingWaker()
