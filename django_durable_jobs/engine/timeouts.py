"""Stopping user code that runs too long, from inside the process that runs it.

A thread cannot be stopped in Python, so limits use ``SIGALRM``: the handler
raises ``JobTimeoutError`` in the main thread, which interrupts a Python loop and
a blocking call alike. Writes to the database are *shielded*: the alarm is
paused while a step is persisted, so a timeout never tears a write in half. Off
the main thread (or without ``SIGALRM``) limits degrade to a check after the
code returns; the worker's supervisor kills a process stuck in C code as a last
resort.
"""

from __future__ import annotations

import math
import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from types import FrameType

ErrorFactory = Callable[[], BaseException]


#: After a limit fired, how long the code may take to unwind before it is stopped
#: with ``Overrun``, which ``except Exception`` cannot swallow.
GRACE = 1.0


class Overrun(BaseException):
    """A limit fired and the code went on (it caught the error): stop it for good.

    ``error`` is the exception the limit raised first, e.g. ``JobTimeoutError``.
    """

    def __init__(self, error: BaseException) -> None:
        super().__init__(str(error))
        self.error = error


@dataclass
class _Limit:
    deadline: float  # time.monotonic()
    error: ErrorFactory
    fired: bool = False


class TimeGuard:
    """Nested wall-time limits for one thread of execution."""

    def __init__(self, *, use_signals: bool | None = None) -> None:
        self._limits: list[_Limit] = []
        self._shielded = 0
        self._deferred: BaseException | None = None
        #: Whether this guard's timer may be running (``_arm`` set it, nothing since
        #: cleared it): a disarm with no timer is a system call for nothing.
        self._armed = False
        if use_signals is None:
            use_signals = (
                hasattr(signal, "SIGALRM") and threading.current_thread() is threading.main_thread()
            )
        self.use_signals = use_signals

    @contextmanager
    def limit(self, seconds: float | None, error: ErrorFactory) -> Iterator[None]:
        """Raise ``error()`` inside the block once ``seconds`` have passed."""
        if seconds is None:
            yield
            return
        entry = _Limit(time.monotonic() + seconds, error)
        self._limits.append(entry)
        self._arm()
        try:
            yield
        finally:
            self._limits.remove(entry)
            self._arm()
        if not self.use_signals and time.monotonic() > entry.deadline:
            raise entry.error()

    @contextmanager
    def shield(self) -> Iterator[None]:
        """No alarm fires inside; an expired limit fires right after the block."""
        self._shielded += 1
        self._arm()
        try:
            yield
        finally:
            self._shielded -= 1
            # Also when the block raised: code that catches it is still under the limits.
            self._arm()
            if not self._shielded and self._deferred is not None:
                deferred, self._deferred = self._deferred, None
                raise deferred

    def interrupt(self, error: BaseException) -> None:
        """Raise ``error`` now (from a signal handler), or, inside a shield (a write in
        flight), as soon as the shield ends: a torn write would break the connection."""
        if self._shielded:
            self._deferred = error
            return
        raise error

    def _arm(self) -> None:
        if not self.use_signals:
            return
        # A limit that already fired has an infinite deadline: no timer for it.
        pending = [limit for limit in self._limits if math.isfinite(limit.deadline)]
        if self._shielded or not pending:
            if self._armed:  # a step's writes and a run's end disarm; twice is once
                signal.setitimer(signal.ITIMER_REAL, 0)
                self._armed = False
            return
        first = min(pending, key=lambda limit: limit.deadline)
        if signal.getsignal(signal.SIGALRM) != self._fire:  # once, unless code replaced it
            signal.signal(signal.SIGALRM, self._fire)
        # A deadline already past still fires, at once: 0 would disarm instead.
        signal.setitimer(signal.ITIMER_REAL, max(first.deadline - time.monotonic(), 1e-6))
        self._armed = True

    def _fire(self, signum: int, frame: FrameType | None) -> None:
        if self._shielded or not self._limits:
            return
        first = min(self._limits, key=lambda limit: limit.deadline)
        if time.monotonic() < first.deadline:  # woken early: re-arm
            self._arm()
            return
        if first.fired:  # the error was caught and the code carried on
            first.deadline = float("inf")
            raise Overrun(first.error())
        # The error unwinds through the limit's own block, which removes the limit;
        # code that swallows it is stopped with Overrun after GRACE.
        first.fired = True
        first.deadline = time.monotonic() + GRACE
        self._arm()
        raise first.error()
