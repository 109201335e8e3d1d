"""Fan-out with real ``runjobs`` processes: a worker SIGKILLed right after it inserted
a fan-out's children (before it recorded the step) and 1,000 children in one step."""

from __future__ import annotations

import signal
from collections import Counter

import pytest

from django_durable_jobs.models import JobRun, RunStatus, StepRecord
from django_durable_jobs.verbs import runs
from tests.processes.worker.test_worker import Workers, wait_until, workers
from tests.testapp import fanout_jobs
from tests.testapp.models import Effect

pytestmark = [pytest.mark.subprocess, pytest.mark.django_db(transaction=True)]
__all__ = ["workers"]  # the fixture, imported for pytest


def succeeded(run: JobRun) -> bool:
    return JobRun.objects.filter(pk=run.pk, status=RunStatus.SUCCEEDED).exists()


def test_a_worker_killed_while_starting_children_starts_each_child_once(
    workers: Workers, monkeypatch: pytest.MonkeyPatch
) -> None:
    parent = fanout_jobs.squares.enqueue(50)
    monkeypatch.setenv("DURABLE_JOBS_TEST_DIE_AFTER_FANOUT", "1")
    doomed = workers.start("doomed")
    assert doomed.proc.wait(timeout=60) == -signal.SIGKILL
    # The worst moment: the children are in, the step that started them is not.
    assert JobRun.objects.filter(parent=parent).count() == 50
    assert not StepRecord.objects.filter(run=parent, name="squares").exists()

    monkeypatch.delenv("DURABLE_JOBS_TEST_DIE_AFTER_FANOUT")
    survivor = workers.start("survivor")
    wait_until(lambda: succeeded(parent), timeout=120, what="the parent", workers=[survivor])
    parent.refresh_from_db()
    assert parent.result is not None
    assert parent.result["results"] == [n * n for n in range(50)]
    assert JobRun.objects.filter(parent=parent).count() == 50  # none started twice
    ran = Counter(Effect.objects.values_list("name", flat=True))
    assert [ran[f"square-{n}"] for n in range(50)] == [1] * 50


def test_a_thousand_children_in_one_step_with_two_workers(workers: Workers) -> None:
    parent = fanout_jobs.squares.enqueue(1000)
    started = [workers.start(f"fan-{n}") for n in range(2)]
    wait_until(lambda: succeeded(parent), timeout=300, what="1,000 children", workers=started)
    parent.refresh_from_db()
    assert parent.result is not None
    assert parent.result["results"] == [n * n for n in range(1000)]
    assert JobRun.objects.filter(parent=parent, status=RunStatus.SUCCEEDED).count() == 1000


def test_an_operator_retry_of_a_failed_fan_out_with_a_real_worker(workers: Workers) -> None:
    parent = fanout_jobs.flaky_all.enqueue(3)
    worker = workers.start("fan-retry")
    failed = JobRun.objects.filter(pk=parent.pk, status=RunStatus.FAILED)
    wait_until(failed.exists, timeout=120, what="the fan-out to fail", workers=[worker])
    runs.retry(parent.pk)  # child 1 now succeeds; only it runs again
    wait_until(lambda: succeeded(parent), timeout=120, what="the retried parent", workers=[worker])
    parent.refresh_from_db()
    assert parent.result == [0, 10, 20]
    ran = Counter(Effect.objects.values_list("name", flat=True))
    assert [ran[f"flaky-{n}"] for n in range(3)] == [1, 2, 1]
    assert JobRun.objects.filter(parent=parent).count() == 4
