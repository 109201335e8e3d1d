"""The diagnostics of a timed-out wait: every thread's stack of every worker process,
forked children included, printed into the worker's log while the worker runs on
(``dump_stacks``; ``faulthandler`` on SIGQUIT, registered by tests/settings.py)."""

from __future__ import annotations

import contextlib
import os
import signal
import time
import warnings

import pytest

from django_durable_jobs.models import RunStatus
from tests.processes.worker.test_worker import (  # noqa: F401 - `workers` is a fixture
    Workers,
    group_members,
    log_events,
    status_of,
    wait_until,
    workers,
)
from tests.testapp import worker_jobs

pytestmark = [pytest.mark.subprocess, pytest.mark.django_db(transaction=True)]


def test_a_dump_shows_every_process_and_thread_and_the_workers_serve_on(
    workers: Workers,  # noqa: F811 - the fixture imported above
) -> None:
    worker = workers.start("dumped", "--concurrency", "2")
    workers.wait_started(worker, processes=2)
    signalled: set[int] = set()

    def dumped() -> bool:
        # One process at a time, so that their dumps do not interleave; a child that
        # replaced one (after a crash the log shows) gets its own SIGQUIT.
        for pid in group_members(worker.pid):
            if pid not in signalled:
                signalled.add(pid)
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGQUIT)
                time.sleep(0.3)
        return worker.log().count("Current thread") >= 3  # the supervisor and 2 children

    wait_until(
        dumped,
        timeout=30,
        what="three processes' stacks in the log",
        workers=[worker],
        detail=lambda: f"SIGQUIT sent to {sorted(signalled)}",
    )
    log = worker.log()
    assert "Thread 0x" in log and 'File "' in log  # other threads, with their frames
    # A dump is not fatal: no process died of the signal (-3 is SIGQUIT's exit code).
    assert "exited with -3" not in log, log_events(worker)
    if "replacing it" in log:  # a child that died of something else: said, not failed
        warnings.warn(f"a worker child was replaced:{log_events(worker)}", stacklevel=1)
    run = worker_jobs.logged.enqueue(3)
    wait_until(
        lambda: status_of(run) == RunStatus.SUCCEEDED,
        timeout=60,
        what="a run after the dump",
        workers=[worker],
    )
    assert worker.terminate() == 0
