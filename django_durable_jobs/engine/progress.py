"""``ctx.set_progress(value)``: a JSON value on the run, last write wins, coalesced.
No Django here; the worker gives the function that writes it.

A job may report progress in a tight loop; that must not cost a database round trip
per call. The newest value is kept and written

- at once, when the last write is at least ``EVERY`` (500 ms) old (sync jobs; an async
  job's ``set_progress`` never blocks its event loop, so its value waits for one of the
  two below),
- at the start of the run's next step, when a value waits and the last write is at
  least ``EVERY`` old,
- at the run's next stop (the attempt succeeds, fails or suspends), always.

So what the database holds is at most ``EVERY`` older than the newest value as long
as the job keeps calling ``set_progress`` or starting steps, and never older than the
attempt's end. It is not a step: not recorded, not replayed.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from ..exceptions import InvalidPayload
from .clock import Clock, SystemClock
from .serialization import NotStorable, roundtrip

#: The least time between two writes of a run's progress.
EVERY = timedelta(milliseconds=500)

log = logging.getLogger("django_durable_jobs.jobs")


class Progress:
    """The progress of one attempt: the newest value and when it was last written."""

    def __init__(
        self,
        write: Callable[[Any], None] | None = None,
        clock: Clock | None = None,
        *,
        every: timedelta = EVERY,
        inline: bool = True,
        max_bytes: int | None = 1_000_000,
    ) -> None:
        """``write``: stores a value (None: kept in memory only); ``inline``: whether
        ``set`` may write (not on an event loop)."""
        self._write = write
        self._clock = clock or SystemClock()
        self._every = every
        self._inline = inline
        self._max_bytes = max_bytes
        self.value: Any = None
        #: A value was set since the last write.
        self.waiting = False
        self._written_at: datetime | None = None

    def set(self, value: Any) -> None:
        """Keep ``value`` (checked now: strict JSON within the size limit), and write
        it at once if the last write is old enough."""
        try:
            stored = roundtrip(value, limit=self._max_bytes)
        except NotStorable as exc:
            why = f"set_progress: the value cannot be stored as JSON: {exc}"
            raise InvalidPayload(why) from None
        self.value, self.waiting = stored, True
        if self._inline and self.due() and not _on_event_loop():
            self.flush()

    def due(self) -> bool:
        """A value waits, and the last write is at least ``every`` old."""
        if not self.waiting or self._write is None:
            return False
        last = self._written_at
        return last is None or self._clock.now() - last >= self._every

    def flush(self) -> None:
        """Write the waiting value, if any."""
        if not self.waiting or self._write is None:
            return
        self.waiting = False
        self._written_at = self._clock.now()
        self._write(self.value)

    def flush_at_stop(self) -> None:
        """``flush`` at the attempt's end: a failure is logged, not raised (the outcome,
        written next, matters more; the database error shows there too)."""
        try:
            self.flush()
        except Exception as exc:
            log.warning("the run's last progress was not written: %s", exc)


def _on_event_loop() -> bool:
    """Whether this thread runs an event loop (an async task of a sync job): a write
    from there would block it, and Django refuses database work there."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True
