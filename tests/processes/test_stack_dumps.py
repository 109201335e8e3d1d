"""The diagnostics of a timed-out wait: every thread's stack of every worker process,
forked children included, printed into the worker's log while the worker runs on
(``dump_stacks``; ``faulthandler`` on SIGQUIT, registered by tests/settings.py)."""

from __future__ import annotations

import pytest

from django_durable_jobs.models import RunStatus
from tests.processes.test_worker_processes import (  # noqa: F401 - `workers` is a fixture
    Workers,
    dump_stacks,
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
    dump_stacks([worker])
    wait_until(
        lambda: worker.log().count("Current thread") >= 3,  # the supervisor and 2 children
        timeout=30,
        what="three processes' stacks in the log",
        workers=[worker],
    )
    log = worker.log()
    assert "Thread 0x" in log and 'File "' in log  # other threads, with their frames
    run = worker_jobs.logged.enqueue(3)
    wait_until(
        lambda: status_of(run) == RunStatus.SUCCEEDED,
        timeout=60,
        what="a run after the dump",
        workers=[worker],
    )
    assert worker.terminate() == 0
