"""The pauses as one worker sees them: read at most once per poll, passed to its claim.

A pause is a row (``models.Pause``); every worker reads the table before a claim once
its last read is a poll old (``POLL_INTERVAL``, ``--poll-interval``), so a pause or a
resume is honoured by every worker within one poll, and a restarted worker reads it
before its first claim. An idle worker polls once per poll anyway: the read is one
more small query then; a busy worker claims many times per poll and reads once. On
PostgreSQL an idle worker reads them before it waits (``loop.Worker._idle``), so a
worker woken by a notification claims at once, as it did before pauses existed.

While nothing is paused the claim is the usual statement (``db/paused.py``). The worker
logs a line when it sees a pause begin and when it sees it end.
"""

from __future__ import annotations

import logging
import time

from .. import conf
from ..db.paused import Paused
from ..models import Pause, PauseKind

log = logging.getLogger("django_durable_jobs.worker")


class PauseWatch:
    """The pauses one worker process last read (from its loop's thread only)."""

    def __init__(self, every: float, worker_id: str = "") -> None:
        #: Seconds between two reads (the poll interval).
        self.every = every
        self.worker_id = worker_id
        self.paused = Paused()
        self._seen: dict[tuple[str, str], tuple[str, str]] = {}
        self._next_read = 0.0

    def current(self) -> Paused | None:
        """The queues and jobs paused as of at most one poll ago; None if none."""
        if time.monotonic() >= self._next_read:
            self.read()
        return self.paused or None

    def read(self) -> Paused:
        """Read the pauses now, logging those that began or ended since the last read."""
        rows = Pause.objects.using(conf.database()).values_list(
            "kind", "name", "reason", "paused_by"
        )
        seen = {(kind, name): (reason, by) for kind, name, reason, by in rows}
        self._next_read = time.monotonic() + self.every
        for kind, name in sorted(seen.keys() - self._seen.keys()):
            log.info(
                "worker %s: pause seen: %s=%s%s; its runs are not claimed until resumed",
                self.worker_id,
                kind,
                name,
                described(*seen[kind, name]),
            )
        for kind, name in sorted(self._seen.keys() - seen.keys()):
            log.info(
                "worker %s: pause ended: %s=%s; its runs are claimed again",
                self.worker_id,
                kind,
                name,
            )
        self._seen = seen
        self.paused = Paused(
            queues=frozenset(name for kind, name in seen if kind == PauseKind.QUEUE),
            jobs=frozenset(name for kind, name in seen if kind == PauseKind.JOB),
        )
        return self.paused


def described(reason: str, by: str) -> str:
    """`` (reason, by who)`` as the log lines and the CLI show it; empty if neither."""
    parts = [part for part in (reason, f"by {by}" if by else "") if part]
    return f" ({'; '.join(parts)})" if parts else ""
