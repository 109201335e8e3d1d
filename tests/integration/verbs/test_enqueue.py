"""Starting runs: transactional, strictly validated, idempotent."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection, transaction

from django_durable_jobs import InvalidPayload, PayloadTooLarge, UnknownJob, enqueue
from django_durable_jobs.models import JobRun, RunStatus
from django_durable_jobs.signals import run_enqueued
from tests.testapp.jobs import add, onboarding


@pytest.mark.django_db
def test_enqueue_writes_a_queued_run() -> None:
    received: list[JobRun] = []

    def on_enqueued(sender: object, run: JobRun, **kwargs: object) -> None:
        received.append(run)

    run_enqueued.connect(on_enqueued)
    try:
        run = add.enqueue(1, b=2)
    finally:
        run_enqueued.disconnect(on_enqueued)
    stored = JobRun.objects.get(pk=run.pk)
    assert (stored.job_name, stored.queue, stored.priority) == ("tests.add", "default", 0)
    assert stored.args == [1] and stored.kwargs == {"b": 2}
    assert stored.status == RunStatus.QUEUED and stored.attempt == 0
    assert stored.wake_at == stored.created_at
    assert received == [run]


@pytest.mark.django_db
def test_enqueue_by_name_and_using_options() -> None:
    run = enqueue("tests.onboarding", user_id=42)
    assert run.job_name == "tests.onboarding" and run.kwargs == {"user_id": 42}
    later = onboarding.using(queue="mail", priority=5, run_after=timedelta(minutes=5)).enqueue(7)
    assert (later.queue, later.priority) == ("mail", 5)
    assert later.wake_at == later.created_at + timedelta(minutes=5)
    at = datetime(2030, 1, 1, tzinfo=UTC)
    assert onboarding.using(run_after=at).enqueue(8).wake_at == at
    with pytest.raises(ValueError, match="aware"):
        onboarding.using(run_after=datetime(2030, 1, 1)).enqueue(9)


@pytest.mark.django_db
def test_unknown_job_lists_close_matches() -> None:
    with pytest.raises(UnknownJob) as info:
        enqueue("tests.onbording", user_id=1)
    assert info.value.code == "X_JOB_UNKNOWN"
    assert "tests.onboarding" in str(info.value)
    assert not JobRun.objects.exists()


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("args", "kwargs", "named"),
    [
        ((float("nan"), 1), {}, "argument 0"),
        ((1,), {"b": float("inf")}, "argument 'b'"),
        ((1,), {"b": "nul\x00"}, "argument 'b'"),
        ((object(),), {}, "argument 0"),
        ((1,), {"b": {1, 2}}, "argument 'b'"),
    ],
)
def test_invalid_payload_names_the_argument_and_writes_nothing(
    args: tuple[object, ...], kwargs: dict[str, object], named: str
) -> None:
    with pytest.raises(InvalidPayload) as info:
        add.enqueue(*args, **kwargs)
    assert info.value.code == "X_PAYLOAD_INVALID"
    assert named in str(info.value) and "tests.add" in str(info.value)
    assert not JobRun.objects.exists()


@pytest.mark.django_db
def test_payload_too_large(settings: object) -> None:
    settings.DURABLE_JOBS = {"MAX_PAYLOAD_BYTES": 100}  # type: ignore[attr-defined]
    with pytest.raises(PayloadTooLarge) as info:
        add.enqueue("x" * 200, 1)
    assert info.value.code == "X_PAYLOAD_TOO_LARGE"
    with pytest.raises(PayloadTooLarge):  # each argument fits, together they do not
        add.enqueue("x" * 60, "y" * 60)
    assert not JobRun.objects.exists()
    add.enqueue("x" * 10, 1)
    assert JobRun.objects.count() == 1


@pytest.mark.django_db(transaction=True)
def test_enqueue_joins_the_callers_transaction() -> None:
    inside = []

    def enqueue_then_fail() -> None:
        with transaction.atomic():
            add.enqueue(1, 2)
            inside.append(JobRun.objects.count())  # visible inside
            raise RuntimeError("roll back")

    with pytest.raises(RuntimeError):
        enqueue_then_fail()
    assert inside == [1]
    assert not JobRun.objects.exists()
    with transaction.atomic():
        add.enqueue(1, 2)
    assert JobRun.objects.count() == 1


@pytest.mark.django_db
def test_idempotency_key_returns_the_existing_run() -> None:
    first = onboarding.using(idempotency_key="onboarding:42").enqueue(user_id=42)
    second = onboarding.using(idempotency_key="onboarding:42").enqueue(user_id=43)
    assert second.pk == first.pk and second.kwargs == {"user_id": 42}
    other_job = add.using(idempotency_key="onboarding:42").enqueue(1, 2)
    assert other_job.pk != first.pk  # keys are unique per job
    assert JobRun.objects.count() == 2
    with pytest.raises(ValueError, match="idempotency_key"):
        add.using(idempotency_key="").enqueue(1, 2)


@pytest.mark.postgres(reason="SQLite serialises writers; the race needs a server database")
@pytest.mark.mariadb
@pytest.mark.django_db(transaction=True)
def test_idempotency_key_under_concurrent_enqueues() -> None:
    threads, results, errors = 8, [], []
    barrier = threading.Barrier(threads)

    def worker() -> None:
        try:
            barrier.wait()
            with transaction.atomic():
                results.append(onboarding.using(idempotency_key="same").enqueue(user_id=1).pk)
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)
        finally:
            connection.close()

    pool = [threading.Thread(target=worker) for _ in range(threads)]
    for thread in pool:
        thread.start()
    for thread in pool:
        thread.join()
    assert errors == []
    assert len(results) == threads and len(set(results)) == 1
    assert JobRun.objects.filter(idempotency_key="same").count() == 1
