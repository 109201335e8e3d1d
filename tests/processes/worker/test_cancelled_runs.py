"""A run cancelled while a real ``runjobs`` process executes it stays cancelled, whatever
becomes of that process: stopped past its drain time-out, or killed. Either way the
lease is let go, and an operator's retry replays the steps that completed.

Same harness as tests/processes/test_worker_processes.py (short leases, waits that poll
the database, worker output printed when a test fails).
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from django_durable_jobs.models import JobRun, RunStatus
from django_durable_jobs.verbs import runs
from tests.processes.worker.test_worker import (  # noqa: F401 - `workers` is a fixture
    REPO_DIR,
    Workers,
    effects,
    status_of,
    wait_until,
    workers,
)
from tests.testapp import worker_jobs

pytestmark = [pytest.mark.subprocess, pytest.mark.django_db(transaction=True)]


def let_go_as_cancelled(run: JobRun) -> None:
    """``run`` is still cancelled, by the operator, and nobody holds it."""
    run.refresh_from_db()
    assert (run.status, run.error_code) == (RunStatus.CANCELLED, "X_RUN_CANCELLED")
    assert (run.lease_owner, run.lease_expires_at) == ("", None)


def retried_to_success(pool: Workers, run: JobRun) -> None:
    """The operator retries ``run``; a ``--burst`` worker executes it and exits."""
    runs.retry(run.pk)
    retrier = pool.start("retrier", "--burst")
    assert retrier.proc.wait(timeout=60) == 0
    run.refresh_from_db()
    assert run.status == RunStatus.SUCCEEDED, (run.error_code, run.error)


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_a_run_cancelled_mid_step_stays_cancelled_when_its_worker_stops_past_the_drain_timeout(
    workers: Workers,  # noqa: F811 - the fixture imported above
    kind: str,
) -> None:
    """Step C works for 3 s; the operator cancels the run, then the worker is told to
    stop and abandons C after its drain time-out. Before: it gave the run back as
    claimed (queued, its X_RUN_CANCELLED error kept) and the next worker executed it
    again. The async run is abandoned by the lane (its task cancelled)."""
    job = worker_jobs.slow_steps if kind == "sync" else worker_jobs.async_slow_steps
    worker = workers.start("stopped", "--drain-timeout", "0.5s")
    workers.wait_started(worker)
    run = job.enqueue(3.0)
    wait_until(lambda: effects(run)["C-started"], timeout=30, what="step C", workers=[worker])
    runs.cancel(run.pk)
    assert worker.terminate(timeout=30) == 0
    let_go_as_cancelled(run)
    assert "let go by its worker instead of given back" in worker.log()
    # A worker that executes everything runnable, then exits, finds nothing to execute.
    after = workers.start("after", "--burst")
    assert after.proc.wait(timeout=60) == 0
    let_go_as_cancelled(run)
    assert (effects(run)["A"], effects(run)["B"], effects(run)["C-started"]) == (1, 1, 1)
    retried_to_success(workers, run)
    counts = effects(run)
    # A and B replayed; C, abandoned before it completed, ran again.
    assert (counts["A"], counts["B"], counts["C-started"]) == (1, 1, 2)


def test_a_run_cancelled_while_its_worker_is_killed_is_let_go_and_jobs_retry_replays_it(
    workers: Workers,  # noqa: F811 - the fixture imported above
) -> None:
    """Before: only running runs were looked at for expired leases, and retry, replay
    and purge all want a run no worker holds: the run kept the dead worker's lease
    for ever, and ``jobs retry`` refused it ("has not stopped it")."""
    first = workers.start("killed")
    workers.wait_started(first)
    run = worker_jobs.slow_steps.enqueue(3.0)
    wait_until(lambda: effects(run)["C-started"], timeout=30, what="step C", workers=[first])
    runs.cancel(run.pk)
    first.kill()
    run.refresh_from_db()
    assert run.status == RunStatus.CANCELLED and run.lease_owner.startswith("killed#")
    reaper = workers.start("reaper")
    wait_until(
        lambda: not JobRun.objects.get(pk=run.pk).lease_owner,
        timeout=30,
        what="a worker's reap to let go of the dead worker's lease",
        workers=[reaper],
    )
    let_go_as_cancelled(run)
    wait_until(
        lambda: "let go of 1 cancelled run(s) whose worker died" in reaper.log(),
        timeout=10,
        what="the reap's warning",
        workers=[reaper],
    )
    retry = subprocess.run(
        [sys.executable, "-m", "django", "jobs", "retry", str(run.pk)],
        cwd=REPO_DIR,
        env=workers.env(),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert retry.returncode == 0, retry.stderr
    wait_until(
        lambda: status_of(run) == RunStatus.SUCCEEDED,
        timeout=60,
        what="the retried run to succeed",
        workers=[reaper],
    )
    counts = effects(run)
    # A and B replayed; C, cut off by the kill, ran again.
    assert (counts["A"], counts["B"], counts["C-started"], counts["C-done"]) == (1, 1, 2, 1)
    assert reaper.terminate() == 0
