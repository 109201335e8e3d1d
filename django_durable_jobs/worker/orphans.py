"""A worker process that outlives its supervisor stops at once.

Killed alone (``kill -9``, the OOM killer), a supervisor cannot tell its children to
stop; left alone they would go on claiming runs, with old code, for as long as they
live. Each child asks Linux to signal it when its parent dies (``PR_SET_PDEATHSIG``),
and, everywhere, a thread checks every second that its parent is still the supervisor.
Either way the child gets ``signum`` (the worker treats it as "stop at once").
"""

from __future__ import annotations

import ctypes
import logging
import os
import sys
import threading
import time
from typing import Any

log = logging.getLogger("django_durable_jobs.worker")

PR_SET_PDEATHSIG = 1
#: How often the portable check looks at the parent pid.
CHECK_EVERY = 1.0


def signal_on_parent_death(signum: int) -> None:
    """Ask Linux to send ``signum`` to this process when its parent dies
    (``PR_SET_PDEATHSIG``); elsewhere nothing. Safe between fork and exec: the C
    function was looked up at import."""
    if _prctl is not None:
        _prctl(PR_SET_PDEATHSIG, int(signum), 0, 0, 0)


def _find_prctl() -> Any:
    if sys.platform != "linux":
        return None
    try:
        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None


_prctl = _find_prctl()


def stop_with_parent(parent: int, signum: int) -> None:
    """Send ``signum`` to this process once ``parent`` (its supervisor) is gone."""
    signal_on_parent_death(signum)
    watcher = threading.Thread(
        target=_watch, args=(parent, signum), name="durable-jobs-parent-watch", daemon=True
    )
    watcher.start()


def _watch(parent: int, signum: int) -> None:
    # Also covers a parent that died before prctl took effect (right after fork).
    while os.getppid() == parent:
        time.sleep(CHECK_EVERY)
    log.warning("worker pid %s: its supervisor (pid %s) is gone; stopping", os.getpid(), parent)
    os.kill(os.getpid(), signum)
