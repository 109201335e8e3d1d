"""Processes whose clocks are wrong (issue 9, item 4): the database's clock decides.

Real ``runjobs`` processes run with their wall clock shifted by two minutes
(``tests/skewed.py``) beside a worker with a correct clock. A process that trusted its
own clock would take over live leases (ahead), write leases that have already expired
and ignore new runs (behind), wake sleeping runs early, and, as an enqueuer or a
publisher ahead, delay the runs it starts or wakes. Every deadline below is far under
the two minutes of skew, so each test fails where a process's own clock decides.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from django_durable_jobs.engine import clock
from django_durable_jobs.models import JobRun, RunStatus
from tests.processes.test_worker_processes import (
    LOG_DIR,
    REPO_DIR,
    Worker,
    Workers,
    effects,
    status_of,
    wait_until,
    workers,  # noqa: F401
)
from tests.testapp import worker_jobs
from tests.testapp.event_jobs import waiter

pytestmark = [pytest.mark.subprocess, pytest.mark.django_db(transaction=True)]

SKEW = 120.0  # seconds
#: Far under the skew: a run that waited for a wrong clock would miss it.
DEADLINE = 45.0
NAP = 8  # seconds


def start_skewed(workers: Workers, name: str, seconds: float, *args: str) -> Worker:  # noqa: F811
    """``runjobs`` in a process whose clock is ``seconds`` off."""
    LOG_DIR.mkdir(parents=True, exist_ok=True)
    log_path = LOG_DIR / f"{workers.test_name}-{name}.log"
    log_file = log_path.open("wb")
    cmd = [sys.executable, "-m", "tests.skewed", str(seconds), "runjobs", "--worker-id", name]
    proc = subprocess.Popen(
        [*cmd, *args],
        cwd=REPO_DIR,
        env=workers.env(),
        stdin=subprocess.DEVNULL,
        stdout=log_file,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    worker = Worker(name, proc, log_path, log_file)
    workers.started.append(worker)
    workers.wait_started(worker)
    return worker


def skewed_command(workers: Workers, seconds: float, *args: str) -> str:  # noqa: F811
    """A management command in a process whose clock is ``seconds`` off; its output."""
    done = subprocess.run(
        [sys.executable, "-m", "tests.skewed", str(seconds), *args],
        cwd=REPO_DIR,
        env=workers.env(),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_a_worker_whose_clock_is_ahead_leaves_live_leases_alone(workers: Workers) -> None:  # noqa: F811
    on_time = workers.start("on-time")
    run = worker_jobs.sleeper.enqueue(10)
    wait_until(
        lambda: effects(run)["sleeper-started"] >= 1,
        timeout=60,
        what="the step to start",
        workers=[on_time],
    )
    ahead = start_skewed(workers, "ahead", SKEW)
    # The worker ahead has looked for expired leases while the run was held.
    assert status_of(run) == RunStatus.RUNNING
    wait_until(
        lambda: status_of(run) == RunStatus.SUCCEEDED,
        timeout=60,
        what="the run to finish",
        workers=[on_time, ahead],
    )
    run.refresh_from_db()
    assert effects(run) == {"sleeper-started": 1, "sleeper-done": 1}  # ran once
    assert run.attempt == 1
    assert "ahead of the database's" in ahead.log()


def test_a_worker_whose_clock_is_behind_takes_new_runs_and_holds_their_leases(
    workers: Workers,  # noqa: F811
) -> None:
    behind = start_skewed(workers, "behind", -SKEW)
    run = worker_jobs.sleeper.enqueue(6)
    wait_until(
        lambda: effects(run)["sleeper-started"] >= 1,
        timeout=DEADLINE,
        what="the worker behind to take a new run",
        workers=[behind],
    )
    run.refresh_from_db()
    assert run.lease_expires_at is not None
    assert run.lease_expires_at > clock.current().now()  # not written already expired
    on_time = workers.start("on-time")  # reaps expired leases as soon as it starts
    workers.wait_started(on_time)
    wait_until(
        lambda: status_of(run) == RunStatus.SUCCEEDED,
        timeout=60,
        what="the run to finish",
        workers=[behind, on_time],
    )
    run.refresh_from_db()
    assert effects(run) == {"sleeper-started": 1, "sleeper-done": 1}
    assert run.attempt == 1


@pytest.mark.parametrize("writer_skew", [SKEW, -SKEW], ids=["ahead", "behind"])
def test_a_sleep_written_by_a_skewed_worker_ends_on_time(
    workers: Workers,  # noqa: F811
    writer_skew: float,
) -> None:
    # One worker starts the sleep, another resumes it: each must mean the same instant.
    writer = start_skewed(workers, "writer", writer_skew)
    began = time.monotonic()
    run = worker_jobs.napper.enqueue(NAP)
    wait_until(
        lambda: status_of(run) == RunStatus.SLEEPING,
        timeout=DEADLINE,
        what="the run to start its sleep",
        workers=[writer],
    )
    assert writer.terminate() == 0
    assert status_of(run) == RunStatus.SLEEPING  # the writer did not resume it itself
    resumer = workers.start("resumer")
    wait_until(
        lambda: status_of(run) in {RunStatus.SUCCEEDED, RunStatus.FAILED},
        timeout=DEADLINE,
        what="the sleep to end and the run to finish",
        workers=[resumer],
    )
    took = time.monotonic() - began
    run.refresh_from_db()
    assert run.status == RunStatus.SUCCEEDED, (run.error_code, run.error)
    assert effects(run) == {"nap-before": 1, "nap-after": 1}
    # A second of slack for the measured clock offsets; a wrong clock is two minutes off.
    assert took >= NAP - 1, f"the {NAP} s sleep ended after {took:.2f}s"


def test_an_enqueuer_or_publisher_whose_clock_is_ahead_does_not_delay_runs(
    workers: Workers,  # noqa: F811
) -> None:
    on_time = workers.start("on-time")
    workers.wait_started(on_time)
    enqueue = "from tests.testapp.worker_jobs import logged; print(logged.enqueue(5).pk)"
    run_id = skewed_command(workers, SKEW, "shell", "-c", enqueue).strip().splitlines()[-1]
    wait_until(
        lambda: status_of(JobRun(pk=run_id)) == RunStatus.SUCCEEDED,
        timeout=DEADLINE,
        what="the run enqueued by a process ahead to run",
        workers=[on_time],
    )

    waiting = waiter.enqueue("k")
    wait_until(
        lambda: status_of(waiting) == RunStatus.WAITING,
        timeout=DEADLINE,
        what="the run to wait for its event",
        workers=[on_time],
    )
    payload = json.dumps({"n": 1})
    skewed_command(workers, SKEW, "jobs", "publish", "keyed", "--key", "k", "--payload", payload)
    # Well inside the 30 s event poll: the publish woke it, and did not postpone it.
    wait_until(
        lambda: status_of(waiting) == RunStatus.SUCCEEDED,
        timeout=20,
        what="the event published by a process ahead to wake the run",
        workers=[on_time],
    )
    waiting.refresh_from_db()
    assert waiting.result == {"n": 1}
