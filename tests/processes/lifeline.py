"""A worker started by a test dies with the test process.

A test kills its workers when it ends, but a pytest process that is killed itself
(``timeout``, an xdist worker replaced, Ctrl-C twice) never gets there: its
single-process ``runjobs`` workers went on polling, and six of them once took 80 % of
this machine's CPU until killed by hand. ``PR_SET_PDEATHSIG`` (Linux) has the kernel
send the worker SIGKILL when the test process is gone; elsewhere nothing changes.
"""

from __future__ import annotations

import ctypes
import signal
import sys
from collections.abc import Callable

PR_SET_PDEATHSIG = 1


def _lifeline() -> Callable[[], None] | None:
    if sys.platform != "linux":
        return None
    # Looked up here, in the parent: after fork only the call itself runs.
    prctl = ctypes.CDLL(None, use_errno=True).prctl

    def die_with_parent() -> None:
        prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)

    return die_with_parent


#: ``Popen(preexec_fn=...)`` for a worker that must not outlive the test process.
die_with_test = _lifeline()
