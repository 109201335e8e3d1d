"""The plans of the fenced batch writes on PostgreSQL (``queries.sql`` claim_outcomes,
insert_steps): the outcomes and the step records of many runs, each written only while
its run's owner holds the lease. They read the documents' runs by their ids, whatever
the statistics say of the running runs: joined by status, a batch of two records read
every running run (every run of a small table, whose statistics said they were all
running), at each write of an async lane's thousand runs in flight."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

import pytest
from django.db import connection

from django_durable_jobs.db.postgresql import claims as postgres
from django_durable_jobs.db.store import OrmStepStore, put_many
from django_durable_jobs.engine.clock import FakeClock
from django_durable_jobs.engine.records import RecordedStep
from django_durable_jobs.engine.vocabulary import StepStatus
from django_durable_jobs.models import JobRun, RunStatus, StepRecord
from tests.factories import JobRunFactory
from tests.integration.db.postgresql.plans import nested_plans

pytestmark = [
    pytest.mark.postgres(reason="a plan of PostgreSQL's"),
    pytest.mark.psycopg3(reason="the batched fenced writes are psycopg 3's"),
    pytest.mark.django_db(transaction=True),
]

RUNNING = 2_000
#: Writes per test: more than the five custom plans of a prepared statement, after
#: which PostgreSQL may keep a generic one.
WRITES = 8
BATCH = 2


def _running(clock: FakeClock) -> list[JobRun]:
    """``RUNNING`` runs held by ``w``, the table analyzed: all of it running."""
    runs = JobRun.objects.bulk_create(
        JobRunFactory.build(
            status=RunStatus.RUNNING,
            lease_owner="w",
            lease_expires_at=clock.now() + timedelta(minutes=5),
        )
        for _ in range(RUNNING)
    )
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE django_durable_jobs_jobrun")
    return runs


def _runs_read(plan: str) -> int:
    """The rows the plan's scans of the runs' table returned, summed (``actual ...
    rows=N loops=L``: N a loop; a scan never executed returned none)."""
    total = 0
    for line in plan.splitlines():
        if "never executed" in line:
            continue
        if "Scan" in line and "on django_durable_jobs_jobrun " in line:
            found = re.search(r"rows=(\d+) loops=(\d+)\)", line)
            assert found is not None, plan
            total += int(found[1]) * int(found[2])
    return total


def _read_by_id(plans: list[str]) -> None:
    """Each write's plan reached its runs through the primary key, and only those."""
    assert len(plans) == WRITES
    for plan in plans:
        assert "Seq Scan on django_durable_jobs_jobrun" not in plan, plan
        assert "django_durable_jobs_jobrun_pkey" in plan, plan
        assert _runs_read(plan) <= BATCH, plan


def _plans_of(call: Any, marker: str) -> list[str]:
    return [plan for plan in nested_plans(call) if marker in plan]


def test_a_batch_of_step_records_reads_its_runs_by_id(clock: FakeClock) -> None:
    runs = _running(clock)
    batches = [runs[n : n + BATCH] for n in range(0, WRITES * BATCH, BATCH)]

    def write() -> None:
        for batch in batches:
            items = [(OrmStepStore(owner="w"), _record(run, clock)) for run in batch]
            assert put_many(items) == [None] * BATCH

    plans = _plans_of(write, "Insert on django_durable_jobs_steprecord")
    _read_by_id(plans)
    assert StepRecord.objects.count() == WRITES * BATCH


def test_a_batch_of_outcomes_reads_its_runs_by_id(clock: FakeClock) -> None:
    runs = _running(clock)
    batches = [runs[n : n + BATCH] for n in range(0, WRITES * BATCH, BATCH)]
    recorded: set[Any] = set()

    def write() -> None:
        for batch in batches:
            finishes = [postgres.Finish(run.pk, "w", _succeeded(clock)) for run in batch]
            recorded.update(postgres.finish("default", finishes, clock.now()))

    plans = _plans_of(write, "Update on django_durable_jobs_jobrun")
    _read_by_id(plans)
    assert recorded == {run.pk for batch in batches for run in batch}
    assert JobRun.objects.filter(status=RunStatus.SUCCEEDED).count() == WRITES * BATCH


def test_a_batch_still_refuses_the_runs_whose_lease_another_owner_holds(
    clock: FakeClock,
) -> None:
    """The fence is the owner's and the status's, as before: found by id, a run
    taken over is not written."""
    runs = _running(clock)[:4]
    JobRun.objects.filter(pk=runs[1].pk).update(lease_owner="another")
    JobRun.objects.filter(pk=runs[3].pk).update(lease_owner="another")
    finishes = [postgres.Finish(run.pk, "w", _succeeded(clock)) for run in runs[:2]]
    assert postgres.finish("default", finishes, clock.now()) == {runs[0].pk}
    errors = put_many([(OrmStepStore(owner="w"), _record(run, clock)) for run in runs[2:]])
    assert errors[0] is None and errors[1] is not None
    assert set(StepRecord.objects.values_list("run_id", flat=True)) == {runs[2].pk}


def _record(run: JobRun, clock: FakeClock) -> RecordedStep:
    return RecordedStep(
        run_id=str(run.pk),
        name="io",
        status=StepStatus.COMPLETED,
        started_at=clock.now(),
        completed_at=clock.now(),
        attempts=1,
        output={"ok": "✓"},
    )


def _succeeded(clock: FakeClock) -> dict[str, Any]:
    return {
        "status": RunStatus.SUCCEEDED,
        "result": None,
        "finished_at": clock.now(),
        "wake_at": None,
        "error_code": "",
        "error": "",
        "error_type": "",
        "traceback": "",
    }
