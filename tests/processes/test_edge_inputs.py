"""A real ``runjobs`` refuses, before its loop starts, options it cannot use (the other
edge inputs: tests/integration/test_edge_inputs.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.db import connection

from django_durable_jobs.models import JobRun, RunStatus
from tests.testapp import async_jobs, jobs

REPO_DIR = Path(__file__).resolve().parents[2]


def runjobs(*args: str) -> subprocess.CompletedProcess[str]:
    """``runjobs --burst`` in a real process on the test database; it must stop at once."""
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "tests.settings",
        "DURABLE_JOBS_TEST_DB_NAME": str(connection.settings_dict["NAME"]),
    }
    return subprocess.run(
        [sys.executable, "-m", "django", "runjobs", "--burst", *args],
        cwd=REPO_DIR,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.subprocess
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--worker-id", "w" * 201], "--worker-id must be 1 to 200 characters"),
        (["--worker-id", ""], "--worker-id must be 1 to 200 characters"),
        (["--worker-id", "host\x01:1\udc80"], "cannot be stored"),
        (["--poll-interval", "0s"], "--poll-interval must be longer than zero"),
        (["--poll-interval", "0ms"], "--poll-interval must be longer than zero"),
    ],
)
def test_runjobs_refuses_what_it_cannot_use_before_it_starts(args: list[str], said: str) -> None:
    jobs.noop.enqueue()
    done = runjobs(*args)
    assert done.returncode == 1, done.stdout + done.stderr
    assert said in done.stderr
    assert " wake=" not in done.stdout + done.stderr  # the worker loop never started
    assert JobRun.objects.get().status == RunStatus.QUEUED


@pytest.mark.subprocess
@pytest.mark.django_db(transaction=True)
def test_a_step_function_that_never_returns_does_not_keep_the_worker_from_exiting() -> None:
    """The sync step functions of async jobs ran on a ThreadPoolExecutor, whose threads
    the interpreter joins at exit: one that hung past its step_timeout held
    ``runjobs --burst`` (and a drained worker, through a second SIGTERM) open for good."""
    run = async_jobs.async_step_never_returns.enqueue()
    done = runjobs()  # times out (120 s) if the process cannot exit
    assert done.returncode == 0, done.stdout + done.stderr
    run.refresh_from_db()
    assert (run.status, run.error_code) == (RunStatus.FAILED, "X_JOB_TIMEOUT")
    assert "1 sync step function(s) still running past their step_timeout" in done.stderr
