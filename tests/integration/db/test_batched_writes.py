"""The async lane's combined writes, on a real database: the new step records of many
runs (``store.put_many``) and the outcomes of many runs (``recording.record_all``) in
one commit, each still fenced by its run's lease; a run whose lease is lost has its
write refused alone, and a write that fails in the middle of a batch loses or doubles
no run's record."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.db import connection

from django_durable_jobs.db import faults
from django_durable_jobs.db.claims import claim
from django_durable_jobs.db.store import LeaseLost, OrmStepStore, put_many
from django_durable_jobs.engine.clock import FakeClock
from django_durable_jobs.engine.records import RecordedStep, StepStore
from django_durable_jobs.engine.vocabulary import StepStatus
from django_durable_jobs.models import JobRun, RunStatus, StepRecord
from django_durable_jobs.worker.execution import run_to_stop
from django_durable_jobs.worker.recording import record_all
from tests.commits import Commits
from tests.factories import T0, JobRunFactory
from tests.testapp import jobs

# Real commits: the test's own transaction would hide them.
pytestmark = pytest.mark.django_db(transaction=True)

RUNS = 6


def record(run_id: Any, name: str = "a") -> RecordedStep:
    return RecordedStep(
        run_id=str(run_id),
        name=name,
        status=StepStatus.COMPLETED,
        started_at=T0,
        completed_at=T0,
        attempts=1,
        output={"v": name},
    )


def batch(runs: list[JobRun]) -> list[tuple[StepStore, RecordedStep]]:
    """Each run's record, written by a store fenced by the run's owner (the lane's way)."""
    return [(OrmStepStore(owner=run.lease_owner), record(run.id)) for run in runs]


def leased(n: int) -> list[JobRun]:
    return [JobRunFactory.create(status="running", lease_owner=f"w{i}") for i in range(n)]


def test_the_new_step_records_of_many_runs_take_one_commit() -> None:
    """One statement on PostgreSQL, one transaction of fenced INSERTs on MariaDB and
    SQLite: one commit for six runs' records, where one by one took six."""
    runs = leased(RUNS)
    with Commits(connection) as together:
        assert put_many(batch(runs)) == [None] * RUNS
    more = leased(RUNS)
    with Commits(connection) as alone:
        for store, step in batch(more):
            store.put(step)
    assert (together.count, alone.count) == (1, RUNS)
    assert StepRecord.objects.filter(name="a").count() == 2 * RUNS


def test_a_run_that_lost_its_lease_has_its_record_refused_and_the_others_are_stored() -> None:
    runs = leased(RUNS)
    lost = runs[2]
    JobRun.objects.filter(pk=lost.pk).update(lease_owner="another-worker")  # taken over
    with Commits(connection) as commits:
        errors = put_many(batch(runs))
    assert commits.count == 1
    assert isinstance(errors[2], LeaseLost)
    assert errors[:2] + errors[3:] == [None] * (RUNS - 1)
    stored = set(StepRecord.objects.values_list("run_id", flat=True))
    assert stored == {run.pk for run in runs} - {lost.pk}


def test_a_fault_in_the_middle_of_a_batch_loses_and_doubles_no_runs_record(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A database error at the third record of six (``faults``: on PostgreSQL the
    connection is cut, elsewhere the write raises): every record is either stored and
    reported so, or not stored and its run told (its step fails, as its own write would
    have); none is stored twice, none reported stored without being so."""
    monkeypatch.setattr(faults, "hit", faults.hit)  # disarmed again after the test
    faults.arm("step.before_record:dberror:3")
    runs = leased(RUNS)
    errors = put_many(batch(runs))
    connection.close()  # cut on PostgreSQL: read the outcome afresh
    stored = list(StepRecord.objects.values_list("run_id", flat=True))
    assert len(stored) == len(set(stored))  # none twice
    for run, error in zip(runs, errors, strict=True):
        assert (error is None) == (run.pk in stored), (run.pk, error)
    assert errors[2] is not None  # the record the fault hit
    # Again, with the fault spent: every record the batch did not store is written now.
    again = put_many([item for item, error in zip(batch(runs), errors, strict=True) if error])
    assert again == [None] * len(again)
    assert StepRecord.objects.count() == RUNS


def test_the_outcomes_of_many_runs_take_one_commit(clock: FakeClock) -> None:
    for n in range(RUNS):
        jobs.add.enqueue(n, 1)
    claimed = claim("w-test", now=clock.now(), lease=timedelta(minutes=1), limit=RUNS)
    pending = [run_to_stop(run, clock=clock, owner="w-test") for run in claimed]
    assert len(pending) == RUNS
    with Commits(connection) as commits:
        record_all([(p, "w-test") for p in pending])
    assert commits.count == 1
    assert sorted(JobRun.objects.values_list("status", "result")) == [
        (RunStatus.SUCCEEDED, n + 1) for n in range(RUNS)
    ]


def test_an_outcome_whose_lease_was_taken_over_is_refused_and_the_others_are_written(
    clock: FakeClock,
) -> None:
    """Each outcome of a batch is fenced by its own run's lease: the run another worker
    took over meanwhile keeps that worker's state, its result is not written."""
    for n in range(RUNS):
        jobs.add.enqueue(n, 1)
    claimed = claim("w-test", now=clock.now(), lease=timedelta(minutes=1), limit=RUNS)
    pending = [run_to_stop(run, clock=clock, owner="w-test") for run in claimed]
    lost = claimed[1].pk
    JobRun.objects.filter(pk=lost).update(lease_owner="w-other")  # taken over
    record_all([(p, "w-test") for p in pending])
    taken = JobRun.objects.get(pk=lost)
    assert (taken.status, taken.lease_owner, taken.result) == (RunStatus.RUNNING, "w-other", None)
    others = JobRun.objects.exclude(pk=lost)
    assert set(others.values_list("status", "lease_owner")) == {(RunStatus.SUCCEEDED, "")}
    assert others.count() == RUNS - 1


#: Outputs as steps return them: unicode, quotes and backslashes, JSON's null, nesting,
#: numbers; and a step that returned nothing.
OUTPUTS: list[Any] = [
    {"v": "ünïcødé ✓ 🎉"},
    'quote " and \\ backslash and {braces}, [brackets]',
    None,
    [1, 2.5, {"deep": [None, True, "€"]}],
    12345678901234,
    "",
]


def test_records_written_together_store_what_one_by_one_stores() -> None:
    """The batch's statement (PostgreSQL: one JSON document) stores each output, time
    and count as a record written alone stores it."""
    together, alone = leased(len(OUTPUTS)), leased(len(OUTPUTS))

    def step(run: JobRun, output: Any) -> tuple[StepStore, RecordedStep]:
        recorded = RecordedStep(
            run_id=str(run.id),
            name="ünï step",
            status=StepStatus.COMPLETED,
            started_at=T0,
            completed_at=T0 + timedelta(microseconds=1),
            attempts=3,
            output=output,
        )
        return OrmStepStore(owner=run.lease_owner), recorded

    assert put_many([step(run, out) for run, out in zip(together, OUTPUTS, strict=True)]) == [
        None
    ] * len(OUTPUTS)
    for run, output in zip(alone, OUTPUTS, strict=True):
        store, recorded = step(run, output)
        store.put(recorded)

    def stored(runs: list[JobRun]) -> list[tuple[Any, ...]]:
        rows = StepRecord.objects.filter(run__in=runs)
        by_run = {
            r.run_id: (r.name, r.output, r.started_at, r.completed_at, r.attempts) for r in rows
        }
        return [by_run[run.pk] for run in runs]

    assert stored(together) == stored(alone)
    assert [row[1] for row in stored(together)] == OUTPUTS
