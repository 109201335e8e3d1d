"""Idempotency keys of debounced enqueues: an enqueue that ``Debounce`` joins to the
pending run keeps its key, so a repeat with it gets that run back, as it would
without a debounce (docs/how-to/flow-control.md), also once the run has started."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import timedelta

import pytest

from django_durable_jobs import signals
from django_durable_jobs.engine.clock import FakeClock
from django_durable_jobs.models import JobRun, RunStatus
from tests.conftest import Driver
from tests.testapp import flow_jobs
from tests.testapp.models import Effect

pytestmark = pytest.mark.django_db


@pytest.fixture
def announced() -> Iterator[list[JobRun]]:
    """The runs ``run_enqueued`` was sent for."""
    runs: list[JobRun] = []
    signals.run_enqueued.connect(
        lambda run, **kw: runs.append(run), weak=False, dispatch_uid="debounce-keys"
    )
    yield runs
    signals.run_enqueued.disconnect(dispatch_uid="debounce-keys")


@pytest.mark.parametrize("first_key", [None, "edit-1"], ids=["first-without-key", "first-keyed"])
def test_a_repeat_of_a_joined_key_gets_the_debounced_run_back_after_it_started(
    driver: Driver, clock: FakeClock, announced: list[JobRun], first_key: str | None
) -> None:
    first = flow_jobs.digest.using(idempotency_key=first_key).enqueue(1, ["a"])
    joined = flow_jobs.digest.using(idempotency_key="edit-2").enqueue(1, ["a", "b"])
    assert joined.pk == first.pk  # debounced: one run, the latest arguments
    clock.advance(timedelta(minutes=5))
    driver.step(first)  # started: a plain enqueue now makes a new run
    assert JobRun.objects.get(pk=first.pk).status != RunStatus.QUEUED

    again = flow_jobs.digest.using(idempotency_key="edit-2").enqueue(1, ["a", "b"])
    assert again.pk == first.pk
    if first_key is not None:
        assert flow_jobs.digest.using(idempotency_key=first_key).enqueue(1, ["a"]).pk == first.pk
    driver.drain()
    assert JobRun.objects.filter(job_name="tests.digest").count() == 1
    assert [run.pk for run in announced] == [first.pk]  # announced once
    assert list(Effect.objects.values_list("name", flat=True)) == ["digest:1:a,b"]


def test_a_repeat_of_a_joined_key_while_pending_joins_the_same_run(clock: FakeClock) -> None:
    first = flow_jobs.digest.enqueue(1, ["a"])
    flow_jobs.digest.using(idempotency_key="edit-2").enqueue(1, ["a", "b"])
    clock.advance(timedelta(minutes=1))
    again = flow_jobs.digest.using(idempotency_key="edit-2").enqueue(1, ["a", "b"])
    assert again.pk == first.pk and again.args == [1, ["a", "b"]]
    assert JobRun.objects.count() == 1


def test_a_joined_key_is_forgotten_with_its_run(driver: Driver, clock: FakeClock) -> None:
    """Deleting the run (``purge``) frees its keys: the key starts a new run."""
    first = flow_jobs.digest.enqueue(1, ["a"])
    flow_jobs.digest.using(idempotency_key="edit-2").enqueue(1, ["b"])
    JobRun.objects.filter(pk=first.pk).delete()
    later = flow_jobs.digest.using(idempotency_key="edit-2").enqueue(1, ["c"])
    assert later.pk != first.pk and later.idempotency_key == "edit-2"


@pytest.mark.postgres(reason="SQLite has one writer; the race needs row locks")
@pytest.mark.mariadb
@pytest.mark.django_db(transaction=True)
def test_concurrent_enqueues_with_one_key_join_one_run(driver: Driver, clock: FakeClock) -> None:
    from django.db import connections, transaction

    first = flow_jobs.digest.enqueue(1, ["a"])
    barrier, joined, errors = threading.Barrier(4), [], []

    def enqueuer() -> None:
        try:
            barrier.wait(timeout=10)
            with transaction.atomic():
                run = flow_jobs.digest.using(idempotency_key="edit-2").enqueue(1, ["b"])
            joined.append(run.pk)
        except Exception as exc:  # an IntegrityError of the key's row, say
            errors.append(exc)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=enqueuer) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert errors == [] and joined == [first.pk] * 4
    clock.advance(timedelta(minutes=5))
    driver.step(first)
    assert flow_jobs.digest.using(idempotency_key="edit-2").enqueue(1, ["b"]).pk == first.pk
    assert JobRun.objects.count() == 1
