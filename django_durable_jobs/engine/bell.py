"""A wake-up that a signal handler may ring (``Bell``).

A stop signal's handler runs on the main thread between two bytecodes, and the main
thread is most often inside the wake-up's wait: holding the ``threading.Event``'s lock
as it enters or leaves it. An ``Event.set()`` from the handler then waits for that
lock for ever (seen: a worker that never exited after SIGTERM). The handler only sets
a flag; the wait looks at it every ``TICK``.
"""

from __future__ import annotations

import threading
import time

#: Seconds between two looks at the flag while waiting.
TICK = 0.02


class Bell:
    def __init__(self) -> None:
        self._event = threading.Event()
        self._rung = False

    def ring(self) -> None:
        """End the wait now (within ``TICK`` from the main thread: a signal handler)."""
        self._rung = True
        if threading.current_thread() is not threading.main_thread():
            self._event.set()

    def wait(self, timeout: float) -> bool:
        """Block up to ``timeout`` seconds; True if rung meanwhile (or before)."""
        deadline = time.monotonic() + timeout
        while not self._rung and (left := deadline - time.monotonic()) > 0:
            self._event.wait(min(TICK, left))
        rung, self._rung = self._rung, False
        self._event.clear()
        return rung
