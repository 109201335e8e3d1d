"""A real ``runjobs`` whose jobs are on a database of their own
(``DURABLE_JOBS["DATABASE"] = "jobs"``, not ``default``): it claims, executes and
records there, registers its Worker row there, and wakes a waiting run on an event
published there; ``default`` holds only what the steps themselves write.

One test, not the processes tier run again with the jobs on another alias: the worker
reaches its database through ``conf.database()`` everywhere, which the integration
tests (tests/integration/db/test_jobs_database.py) cover in-process; this checks that
a worker process picks the alias up from the settings and keeps to it.
"""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connections, transaction

from django_durable_jobs import publish_event
from django_durable_jobs.models import Event, JobRun, RunStatus, StepRecord, Worker
from tests.processes.worker.test_worker import Workers, wait_until, workers  # noqa: F401
from tests.testapp import event_jobs, jobs
from tests.testapp.models import Effect

pytestmark = [
    pytest.mark.subprocess,
    pytest.mark.django_db(transaction=True, databases=["default", "jobs"]),
]

JOBS = "jobs"


def test_a_worker_on_the_jobs_own_database(workers: Workers, settings: Any) -> None:  # noqa: F811
    settings.DURABLE_JOBS = {**settings.DURABLE_JOBS, "DATABASE": JOBS}
    with transaction.atomic():  # the caller's own transaction, on default
        jobs.three_steps.enqueue_on_commit(7)
    waiting = event_jobs.waiter.enqueue("k")
    worker = workers.start(
        "jobs-db",
        env={
            "DURABLE_JOBS_TEST_DATABASE": JOBS,
            "DURABLE_JOBS_TEST_JOBS_DB_NAME": str(connections[JOBS].settings_dict["NAME"]),
        },
    )
    runs = JobRun.objects.using(JOBS)
    wait_until(
        lambda: (
            runs.filter(pk=waiting.pk, status=RunStatus.WAITING).exists()
            and runs.filter(job_name="tests.three_steps", status=RunStatus.SUCCEEDED).exists()
        ),
        timeout=30,
        what="the three steps to finish and the waiter to wait",
        workers=[worker],
    )
    publish_event("keyed", {"n": 1}, key="k")
    wait_until(
        lambda: runs.filter(pk=waiting.pk, status=RunStatus.SUCCEEDED).exists(),
        timeout=30,
        what="the event to wake the waiter",
        workers=[worker],
    )
    assert StepRecord.objects.using(JOBS).filter(run__job_name="tests.three_steps").count() == 3
    assert Worker.objects.using(JOBS).filter(worker_id="jobs-db").exists()
    assert Effect.objects.count() > 0  # the steps' own writes, on default
    for model in (JobRun, StepRecord, Event, Worker):
        assert not model.objects.using("default").exists(), model.__name__
    assert worker.terminate() == 0
