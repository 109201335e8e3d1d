"""Skewed clocks (issue 11, issue 9 item 4): workers and publishers whose clocks are
two minutes off run beside correct ones (tests/skewed.py shifts a process's clock).

No lease is stolen from a live worker, and no run starts or wakes early or late by more
than the poll interval. Until lease, runnable and wake-up decisions move to the
database's clock (another branch), each process's clock decides: these are expected to
fail, and say so.
"""

from __future__ import annotations

import subprocess
import sys
from datetime import datetime, timedelta

import pytest

from django_durable_jobs.models import JobRun, RunStatus
from tests.test_worker_processes import (  # noqa: F401 - `workers` is a fixture
    REPO_DIR,
    Workers,
    effects,
    status_of,
    wait_until,
    workers,
)
from tests.testapp import worker_jobs
from tests.testapp.models import Effect

pytestmark = [
    pytest.mark.subprocess,
    pytest.mark.django_db(transaction=True),
    pytest.mark.xfail(
        reason="leases, runnable-now and wake-ups use each process's clock until the "
        "database-clock change (issue 9 item 4) is merged",
        strict=False,
    ),
]
SKEW = 120.0


def test_a_worker_whose_clock_is_ahead_steals_no_live_lease(workers: Workers) -> None:  # noqa: F811
    right = workers.start("right")
    workers.wait_started(right)
    run = worker_jobs.sleeper.enqueue(5)  # one 5 s step, heartbeat every 0.5 s
    wait_until(
        lambda: effects(run)["sleeper-started"] >= 1, timeout=60, what="the step", workers=[right]
    )
    ahead = workers.start("ahead", skew=SKEW)
    workers.wait_started(ahead)
    wait_until(
        lambda: status_of(run) == RunStatus.SUCCEEDED,
        timeout=90,
        what="the run",
        workers=[right, ahead],
    )
    run.refresh_from_db()
    assert run.attempt == 1
    assert effects(run) == {"sleeper-started": 1, "sleeper-done": 1}  # never in two processes


@pytest.mark.parametrize("skew", [-SKEW, SKEW])
def test_runs_start_on_time_whatever_the_clocks_of_workers_and_enqueuers(
    workers: Workers,  # noqa: F811
    skew: float,
) -> None:
    worker = workers.start("skewed", skew=skew)
    workers.wait_started(worker)
    # Enqueued to start in 1 s by a process whose clock is off the other way.
    code = (
        "import django, datetime; django.setup(); from tests.testapp import worker_jobs; "
        "run = worker_jobs.sleeper.using(run_after=datetime.timedelta(seconds=1)).enqueue(0); "
        "print(run.id, datetime.datetime.now(datetime.UTC).isoformat())"
    )
    out = subprocess.run(
        [sys.executable, str(REPO_DIR / "tests" / "skewed.py"), str(-skew), "-c", code],
        env=workers.env(),
        cwd=REPO_DIR,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    run_id, enqueued_at = out.stdout.split()[-2:]
    run = JobRun.objects.get(pk=run_id)
    # Generous: the poll interval is 0.1 s; a skew shows in minutes, not seconds.
    wait_until(
        lambda: status_of(run) == RunStatus.SUCCEEDED,
        timeout=30,
        what=f"the run (clocks {2 * skew:+.0f}s apart)",
        workers=[worker],
    )
    started = Effect.objects.get(run_id=run_id, name="sleeper-started").created_at
    assert started >= datetime.fromisoformat(enqueued_at) + timedelta(seconds=0.9)  # not early
