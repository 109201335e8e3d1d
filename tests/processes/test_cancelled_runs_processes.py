"""A run cancelled while a real ``runjobs`` process executes it stays cancelled, whatever
becomes of that process: stopped past its drain time-out, or killed. Either way the
lease is let go, and an operator's retry replays the steps that completed.

Same harness as tests/processes/test_worker_processes.py (short leases, waits that poll
the database, worker output printed when a test fails).
"""

from __future__ import annotations

import pytest

from django_durable_jobs.models import JobRun, RunStatus
from django_durable_jobs.verbs import runs
from tests.processes.test_worker_processes import (  # noqa: F401 - `workers` is a fixture
    Workers,
    effects,
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
    assert "let go by its stopping worker, not given back" in worker.log()
    # A worker that executes everything runnable, then exits, finds nothing to execute.
    after = workers.start("after", "--burst")
    assert after.proc.wait(timeout=60) == 0
    let_go_as_cancelled(run)
    assert (effects(run)["A"], effects(run)["B"], effects(run)["C-started"]) == (1, 1, 1)
    retried_to_success(workers, run)
    counts = effects(run)
    # A and B replayed; C, abandoned before it completed, ran again.
    assert (counts["A"], counts["B"], counts["C-started"]) == (1, 1, 2)
