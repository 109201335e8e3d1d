"""Runs on their last attempt claimed in a batch by a real ``runjobs`` that is killed
with most of them still waiting in hand (README "Execution model and timeouts").

Same harness as tests/processes/test_worker_processes.py: short leases (2 s, a beat
every 0.5 s), waits that poll the database until generous deadlines, worker output
printed when a test fails.
"""

from __future__ import annotations

import signal
from collections import Counter
from pathlib import Path

import pytest
from django.db import transaction
from django.db.models import F

from django_durable_jobs.models import JobRun, RunStatus
from tests.processes.worker.test_worker import (  # noqa: F401 - `workers` is a fixture
    Workers,
    wait_until,
    workers,
)
from tests.testapp import worker_jobs
from tests.testapp.models import Execution

pytestmark = [pytest.mark.subprocess, pytest.mark.django_db(transaction=True)]

RUNS = 120
FINISHED = {RunStatus.SUCCEEDED, RunStatus.FAILED}


def test_runs_of_a_killed_batch_that_never_began_keep_their_one_attempt(
    workers: Workers,  # noqa: F811 - the fixture imported above
    tmp_path: Path,
) -> None:
    gate = tmp_path / "blocked"
    with transaction.atomic():
        runs = [worker_jobs.once_in_a_batch.enqueue(str(gate)) for _ in range(RUNS)]
    ids = {str(run.id) for run in runs}
    first = workers.start("first")
    # retries=0: each run is on its last attempt. Before, such runs were given back from
    # a batch at once and claimed one by one: none ever waited beside another. A batch of
    # two is enough: the worker's batches double only after runs quicker than
    # worker.loop.QUICK_RUN (20 ms), which a loaded machine rarely gives several in a row.
    wait_until(
        gate.exists,
        timeout=90,
        what="a run to begin with another run of its batch waiting in hand",
        workers=[first],
    )
    [blocked] = Execution.objects.filter(pid=first.pid, ended_ns=0).values_list("run_id", flat=True)
    # The heartbeat records the start of a batch's run: from then on a lapse counts it.
    wait_until(
        lambda: JobRun.objects.filter(pk=blocked, attempt_started_by=F("lease_owner")).exists(),
        timeout=30,
        what="the heartbeat to record the blocked run's start",
        workers=[first],
    )
    owner = JobRun.objects.values_list("lease_owner", flat=True).get(pk=blocked)
    in_hand = {
        str(pk) for pk in JobRun.objects.filter(lease_owner=owner).values_list("pk", flat=True)
    }
    assert first.kill() == -signal.SIGKILL
    began = set(Execution.objects.filter(pid=first.pid).values_list("run_id", flat=True))
    waiting = in_hand - began
    assert waiting, (in_hand, began)

    second = workers.start("second")
    wait_until(
        lambda: JobRun.objects.filter(pk__in=ids, status__in=FINISHED).count() == RUNS,
        timeout=120,
        what="every run to finish in the second worker",
        workers=[second],
    )
    assert second.terminate() == 0

    rows = {str(row.pk): row for row in JobRun.objects.filter(pk__in=ids)}
    failed = {run_id for run_id, row in rows.items() if row.status == RunStatus.FAILED}
    executions = Counter(Execution.objects.values_list("run_id", flat=True))
    print(
        f"\n[last attempts] {len(in_hand)} in hand when killed, {len(waiting)} waiting, "
        f"{len(began)} begun in the killed worker; failed: {len(failed)}"
    )
    # Only a run whose function began in the killed worker may have failed, its one
    # attempt used up; the blocked one did, its start recorded before the kill.
    assert failed <= began and blocked in failed
    assert {rows[run_id].error_code for run_id in failed} == {"X_ATTEMPTS_EXHAUSTED"}
    assert executions[blocked] == 1
    # Every other run succeeded on its one attempt: those that waited in hand when the
    # worker died (never begun) executed once, in the second worker.
    for run_id in ids - began:
        assert (rows[run_id].status, rows[run_id].attempt) == (RunStatus.SUCCEEDED, 1), run_id
        assert executions[run_id] == 1, run_id
    assert all(rows[run_id].status == RunStatus.SUCCEEDED for run_id in began - failed)
