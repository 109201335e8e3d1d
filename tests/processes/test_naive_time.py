"""``USE_TZ = False`` with a real worker process (``runjobs --burst`` on
``tests.settings_naive``): it drains, sleeps, waits and resumes runs all the same."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.db import connection

from django_durable_jobs.models import JobRun, RunStatus
from django_durable_jobs.verbs import runs
from django_durable_jobs.verbs.events import publish_event
from tests.integration.test_naive_time import naive  # noqa: F401
from tests.testapp import jobs
from tests.testapp.admin_jobs import napper, waiter

REPO_DIR = Path(__file__).resolve().parents[2]


def runjobs_burst() -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "tests.settings_naive",
        "DURABLE_JOBS_TEST_DB_NAME": str(connection.settings_dict["NAME"]),
    }
    return subprocess.run(
        [sys.executable, "-m", "django", "runjobs", "--burst", "--poll-interval", "0.1s"],
        cwd=REPO_DIR,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.mark.subprocess
@pytest.mark.django_db(transaction=True)
def test_a_real_worker_drains_runs_with_use_tz_false(naive: None) -> None:  # noqa: F811
    done = jobs.three_steps.enqueue(1)
    napping = napper.enqueue()
    waiting = waiter.enqueue("42")
    burst = runjobs_burst()
    assert burst.returncode == 0, burst.stderr
    assert JobRun.objects.get(pk=done.pk).status == RunStatus.SUCCEEDED
    assert JobRun.objects.get(pk=napping.pk).status == RunStatus.SLEEPING
    assert JobRun.objects.get(pk=waiting.pk).status == RunStatus.WAITING
    runs.wake(napping.pk)
    publish_event("order.paid", {"order": 1}, key="42")  # commits: wakes the waiter
    burst = runjobs_burst()
    assert burst.returncode == 0, burst.stderr
    for run in (done, napping, waiting):
        run.refresh_from_db()
        assert run.status == RunStatus.SUCCEEDED, (run.job_name, run.error)
    assert waiting.result == {"order": 1}
