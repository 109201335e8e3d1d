"""How a worker is told to stop: the signals, and what each one does to the run in hand.

SIGTERM/SIGINT: the first drains, the second abandons the run in hand. A supervisor
forwards SIGUSR1 (drain) and SIGUSR2 (abandon) instead, so a child that also got the
signal directly (Ctrl-C reaches the whole process group, systemd signals the whole
cgroup) does not count one stop request twice. A drain that outlasts
``--drain-timeout`` becomes an abandon.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
from datetime import timedelta
from types import FrameType
from typing import TYPE_CHECKING, Protocol

from ..engine.timeouts import TimeGuard
from ..models import JobRun

if TYPE_CHECKING:
    from .lane import AsyncLane
    from .wakeup import Waker

log = logging.getLogger("django_durable_jobs.worker")


class StopNow(BaseException):
    """Raised in the main thread by a second stop signal: abandon the run in hand."""


class _Options(Protocol):
    """What stopping reads of ``loop.WorkerOptions``."""

    @property
    def worker_id(self) -> str: ...
    @property
    def drain_timeout(self) -> timedelta: ...


class StopSignals:
    """The stop-signal handlers of ``Worker`` (the loop sets these attributes)."""

    options: _Options
    stopping: threading.Event
    _signals: int
    _in_hand: JobRun | None
    _guard: TimeGuard | None
    _lane: AsyncLane | None
    _waker: Waker | None

    def install_signal_handlers(self) -> None:
        signal.signal(signal.SIGTERM, self._on_signal)
        signal.signal(signal.SIGINT, self._on_signal)
        signal.signal(signal.SIGUSR1, self._on_drain)
        signal.signal(signal.SIGUSR2, self._on_abandon)

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self._signals += 1
        if self._signals == 1:
            self._drain(signal.Signals(signum).name)
        else:
            self._abandon()

    def _on_drain(self, signum: int, frame: FrameType | None) -> None:
        self._drain("SIGUSR1 from the supervisor")

    def _on_abandon(self, signum: int, frame: FrameType | None) -> None:
        if not self.stopping.is_set():
            log.warning(
                "worker %s: stopping at once (SIGUSR2: a second stop, or the supervisor is "
                "gone): giving back the run in hand",
                self.options.worker_id,
            )
        self._abandon()

    def _drain(self, why: str) -> None:
        if self.stopping.is_set():
            return
        log.info("worker %s: stopping (%s): %s", self.options.worker_id, why, self._doing())
        self.stop()
        drain = self.options.drain_timeout.total_seconds()
        timer = threading.Timer(drain, os.kill, (os.getpid(), signal.SIGUSR2))
        timer.daemon = True
        try:
            timer.start()
        except RuntimeError:  # "can't create new thread at interpreter shutdown"
            return  # exiting already: nothing left to drain

    def _doing(self) -> str:
        """What the worker finishes before it exits."""
        if self._in_hand is not None:
            return "finishing the run in hand"
        # The lane's lock is re-entrant: safe in a handler that interrupted its holder.
        begun, waiting = self._lane.in_hand() if self._lane is not None else (0, 0)
        doing = [f"finishing {begun} async run(s) in flight"] if begun else []
        if waiting:  # claimed ahead of the lane's slots: given back, not begun
            doing.append(f"giving back {waiting} claimed ahead")
        return ", ".join(doing) or "idle, exiting"

    def _abandon(self) -> None:
        self.stop()
        if self._lane is not None:
            self._lane.abandon()
        guard, self._guard = self._guard, None
        if self._in_hand is not None and guard is not None:
            # Once per run: a second stop (the supervisor's death is signalled both by
            # PR_SET_PDEATHSIG and by the watcher) must not tear the release it starts.
            # Not in the middle of a step's write: that would leave the connection torn.
            guard.interrupt(StopNow())

    def stop(self) -> None:
        self.stopping.set()
        interrupt = getattr(self._waker, "interrupt", None)
        if interrupt is not None:
            interrupt()
