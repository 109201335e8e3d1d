"""A worker process that outlives its supervisor stops at once.

Killed alone (``kill -9``, the OOM killer), a supervisor cannot tell its children to
stop; left alone they would go on claiming runs, with old code, for as long as they
live. Each child asks Linux to signal it when its parent dies (``PR_SET_PDEATHSIG``),
and, everywhere, a thread checks every second that its parent is still the supervisor.
Either way the child gets ``signum`` (the worker treats it as "stop at once").
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import sys
import threading
import time

log = logging.getLogger("django_durable_jobs.worker")

PR_SET_PDEATHSIG = 1
#: How often the portable check looks at the parent pid.
CHECK_EVERY = 1.0


def stop_with_parent(parent: int, signum: int) -> None:
    """Send ``signum`` to this process once ``parent`` (its supervisor) is gone."""
    if sys.platform == "linux":
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signum, 0, 0, 0)
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
