"""A rolling deploy with real ``runjobs`` processes: an old worker and a new one with
different registries (``DURABLE_JOBS["JOB_MODULES"]``: tests/testapp/rolling_v1.py and
rolling_v2.py), runs sleeping across the switch. No run fails or runs a step twice,
and each run is executed by a worker that registers its job and version; a run no live
worker can execute fails only after ``UNKNOWN_JOB_GRACE``."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
from django.db import transaction

from django_durable_jobs.models import JobRun, RunStatus
from tests.processes.worker.test_worker import Workers, wait_until, workers  # noqa: F401
from tests.testapp.models import Effect
from tests.testapp.rolling_v1 import rolling_v1
from tests.testapp.rolling_v2 import rolling_added, rolling_v2

pytestmark = [pytest.mark.subprocess, pytest.mark.django_db(transaction=True)]

OLD = "jobs,rolling_v1"


def start(workers: Workers, role: str, modules: str, **env: str) -> Any:  # noqa: F811
    worker = workers.start(
        role, env={"DURABLE_JOBS_TEST_JOB_MODULES": modules, "ROLLING_ROLE": role, **env}
    )
    workers.wait_started(worker)
    return worker


def enqueue_v1(count: int) -> list[JobRun]:
    """Runs of version 1, as the old deploy's web processes start them (this process
    registers version 2 too, so its enqueue starts version 2)."""
    with transaction.atomic():
        runs = [rolling_v1.enqueue() for _ in range(count)]
        JobRun.objects.filter(pk__in=[run.pk for run in runs]).update(job_version=1)
    return runs


def statuses(runs: list[JobRun]) -> Counter[str]:
    return Counter(
        JobRun.objects.filter(pk__in=[r.pk for r in runs]).values_list("status", flat=True)
    )


def all_in(runs: list[JobRun], status: str) -> bool:
    return statuses(runs) == Counter({status: len(runs)})


def steps_by(runs: list[JobRun]) -> dict[str, Counter[str]]:
    """Each run's effects: step@worker -> how many times."""
    found: dict[str, Counter[str]] = {str(run.pk): Counter() for run in runs}
    for run_id, name in Effect.objects.filter(run_id__in=found).values_list("run_id", "name"):
        found[run_id][name] += 1
    return found


def test_a_deploy_that_adds_a_job_and_a_version_loses_no_run(workers: Workers) -> None:  # noqa: F811
    old = start(workers, "old", OLD)
    v1 = enqueue_v1(4)
    wait_until(
        lambda: all_in(v1, RunStatus.SLEEPING), timeout=60, what="v1 runs to sleep", workers=[old]
    )
    # The new web code ships before its workers: runs only the new worker can execute.
    v2 = [rolling_v2.enqueue() for _ in range(4)]
    added = [rolling_added.enqueue() for _ in range(4)]
    assert {run.job_version for run in v2} == {2}
    new = start(workers, "new", "jobs,rolling_v1,rolling_v2")
    every = v1 + v2 + added
    wait_until(
        lambda: all_in(every, RunStatus.SUCCEEDED),
        timeout=90,
        what="every run to succeed",
        workers=[old, new],
        detail=lambda: str(statuses(every)),
    )
    assert old.terminate() == 0 and new.terminate() == 0
    done = steps_by(every)
    for run in v1:  # slept across the deploy; either worker has version 1
        assert sorted(n.split("@")[0] for n in done[str(run.pk)].elements()) == ["one", "two"]
        assert "one@old" in done[str(run.pk)]
    for run in v2:
        assert done[str(run.pk)] == Counter({"one@new": 1, "two-v2@new": 1})
    for run in added:
        assert done[str(run.pk)] == Counter({"one@new": 1, "two@new": 1})
    # The old worker claimed some of the new runs before it heard of the new worker and
    # gave them back untouched: not an attempt of theirs.
    assert set(
        JobRun.objects.filter(pk__in=[r.pk for r in v2 + added]).values_list("attempt", flat=True)
    ) == {1}
    assert "Traceback" not in old.log()


def test_a_deploy_that_removes_a_version_leaves_its_runs_to_the_old_worker(
    workers: Workers,  # noqa: F811
) -> None:
    old = start(workers, "old", OLD)
    v1 = enqueue_v1(4)
    wait_until(
        lambda: all_in(v1, RunStatus.SLEEPING), timeout=60, what="v1 runs to sleep", workers=[old]
    )
    # The new deploy has removed version 1: only the old worker can finish those runs.
    new = start(workers, "new", "jobs,rolling_v2", DURABLE_JOBS_TEST_UNKNOWN_JOB_GRACE="4s")
    v2 = [rolling_v2.enqueue() for _ in range(4)]
    wait_until(
        lambda: all_in(v1 + v2, RunStatus.SUCCEEDED),
        timeout=90,
        what="every run to succeed",
        workers=[old, new],
        detail=lambda: str(statuses(v1 + v2)),
    )
    done = steps_by(v1 + v2)
    for run in v1:
        assert done[str(run.pk)] == Counter({"one@old": 1, "two@old": 1})
    for run in v2:
        assert done[str(run.pk)] == Counter({"one@new": 1, "two-v2@new": 1})
    assert "left to other workers" not in new.log()  # it never claimed a v1 run

    # The old workers are gone; a v1 run still comes (an old web process): nobody can
    # execute it, so it stays parked for the grace, then fails naming its version.
    assert old.terminate() == 0
    (late,) = enqueue_v1(1)
    wait_until(
        lambda: JobRun.objects.get(pk=late.pk).status == RunStatus.FAILED,
        timeout=60,
        what="the orphaned v1 run to fail",
        workers=[new],
    )
    late.refresh_from_db()
    assert late.error_code == "X_JOB_UNKNOWN"
    assert "job 'tests.rolling' has no version 1 registered here (versions: 2)" in late.error
    assert late.finished_at is not None and late.wake_at is None
    assert (late.finished_at - late.created_at).total_seconds() >= 4  # the grace
    assert not Effect.objects.filter(run_id=str(late.pk)).exists()
