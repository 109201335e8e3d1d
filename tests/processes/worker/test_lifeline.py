"""The lifeline of the process tests (tests/processes/lifeline.py): a process a test
starts with ``die_with_test`` is killed by the kernel when the test process dies,
however it dies (here: SIGKILL, which no cleanup survives)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from tests.processes.worker.test_worker import REPO_DIR

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="PR_SET_PDEATHSIG is Linux's")

#: The test process in small: starts a long sleeper as a test starts a worker, prints its
#: pid, then waits to be killed.
STAND_IN = """
import subprocess, sys, time
from tests.processes.lifeline import die_with_test
child = subprocess.Popen(["sleep", "600"], preexec_fn=die_with_test)
print(child.pid, flush=True)
time.sleep(600)
"""


def alive(pid: int) -> bool:
    """True while ``pid`` runs (a zombie, dead but not yet reaped, counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_a_process_started_with_the_lifeline_dies_with_the_test_process() -> None:
    stand_in = subprocess.Popen(
        [sys.executable, "-c", STAND_IN], cwd=REPO_DIR, stdout=subprocess.PIPE, text=True
    )
    assert stand_in.stdout is not None
    sleeper = int(stand_in.stdout.readline())
    try:
        assert alive(sleeper)
        stand_in.kill()
        stand_in.wait(timeout=10)
        deadline = time.monotonic() + 10
        while alive(sleeper) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not alive(sleeper), f"sleep {sleeper} outlived the process that started it"
    finally:
        if alive(sleeper):
            os.kill(sleeper, signal.SIGKILL)
