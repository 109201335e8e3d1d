"""enqueue_many, the NOTIFY trigger, and a run cancelled while it executes."""

from __future__ import annotations

from collections import Counter
from datetime import timedelta
from typing import Any

import pytest
from django.db import connection, transaction

from django_durable_jobs import InvalidPayload
from django_durable_jobs.db.claims import claim
from django_durable_jobs.engine.clock import FakeClock
from django_durable_jobs.models import JobRun, RunStatus
from django_durable_jobs.verbs import runs
from django_durable_jobs.worker.execution import execute
from django_durable_jobs.worker.heartbeat import Heartbeat as _Heartbeat
from tests.testapp import jobs
from tests.testapp.models import Effect

LEASE = timedelta(minutes=1)


@pytest.mark.django_db
def test_enqueue_many_writes_every_call() -> None:
    runs = jobs.add.using(queue="bulk", priority=3).enqueue_many([(1, 2), {"a": 3, "b": 4}, (5, 6)])
    assert len(runs) == 3
    stored = list(JobRun.objects.order_by("created_at", "args"))
    assert {(tuple(r.args), tuple(sorted(r.kwargs.items()))) for r in stored} == {
        ((1, 2), ()),
        ((), (("a", 3), ("b", 4))),
        ((5, 6), ()),
    }
    assert {(r.queue, r.priority, r.status) for r in stored} == {("bulk", 3, RunStatus.QUEUED)}


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("calls", "error", "named"),
    [
        ([(1, 2), (float("nan"), 1)], InvalidPayload, "call 1: argument 0"),
        ([{"a": 1, "b": {1}}], InvalidPayload, "call 0: argument 'b'"),
        ([(1, 2), [1, 2]], TypeError, "call 1"),
    ],
)
def test_enqueue_many_validates_everything_before_writing(
    calls: list[Any], error: type[Exception], named: str
) -> None:
    with pytest.raises(error, match=named):
        jobs.add.enqueue_many(calls)
    assert not JobRun.objects.exists()


@pytest.mark.django_db
def test_enqueue_many_refuses_idempotency_keys() -> None:
    with pytest.raises(ValueError, match="idempotency_key"):
        jobs.add.using(idempotency_key="k").enqueue_many([(1, 2)])


@pytest.mark.postgres(reason="LISTEN/NOTIFY is PostgreSQL's")
@pytest.mark.django_db(transaction=True)
@pytest.mark.psycopg3(reason="LISTEN/NOTIFY is psycopg 3's")
def test_enqueue_notifies_listeners_on_commit_only() -> None:
    import psycopg

    params = {
        k: v
        for k, v in connection.get_connection_params().items()
        if k not in {"cursor_factory", "context"}
    }
    with psycopg.connect(autocommit=True, **params) as listener:
        listener.execute("LISTEN durable_jobs")

        def rolled_back() -> None:
            with transaction.atomic():
                jobs.noop.enqueue()
                raise RuntimeError

        with pytest.raises(RuntimeError):
            rolled_back()
        assert list(listener.notifies(timeout=0.2, stop_after=1)) == []
        jobs.noop.enqueue_many([(), ()])
        got = list(listener.notifies(timeout=5, stop_after=1))
        assert [n.channel for n in got] == ["durable_jobs"]


@pytest.mark.django_db
def test_run_cancelled_while_executing_stops_at_its_next_step(clock: FakeClock) -> None:
    run = jobs.cancelled_midway.enqueue()
    [claimed] = claim("w", now=clock.now(), lease=LEASE)
    executed = execute(claimed, clock=clock, owner="w")
    assert not executed.recorded
    run.refresh_from_db()
    assert run.status == RunStatus.CANCELLED and run.error_code == "X_RUN_CANCELLED"
    assert run.lease_owner == "" and run.lease_expires_at is None
    # "two" ran after the cancel (no heartbeat told the worker yet): its effect happened,
    # so it is recorded; then the run stopped.
    assert list(run.steps.order_by("started_at").values_list("name", flat=True)) == [
        "one",
        "two",
    ]
    assert not Effect.objects.filter(name="c-three").exists()
    # An operator's retry replays "one" and "two" instead of running them again.
    runs.retry(run.pk, now=clock.now())
    [again] = claim("w2", now=clock.now(), lease=LEASE)
    execute(again, clock=clock, owner="w2")
    run.refresh_from_db()
    assert run.status == RunStatus.SUCCEEDED, run.error
    assert Counter(Effect.objects.values_list("name", flat=True)) == {
        "c-one": 1,
        "c-two": 1,
        "c-three": 1,
        "c-cancelled": 1,
    }


@pytest.mark.django_db
def test_heartbeat_notices_cancellation(clock: FakeClock) -> None:
    run = jobs.noop.enqueue()
    [claimed] = claim("w", now=clock.now(), lease=LEASE)
    beat = _Heartbeat(clock, LEASE, timedelta(seconds=10))
    beat.hold("w", claimed.pk)
    interruption = beat.interruption_for(claimed.pk)
    beat._beat("w", claimed.pk)
    assert interruption() is None  # still ours: the lease was renewed
    JobRun.objects.filter(pk=run.pk).update(status=RunStatus.CANCELLED)
    beat._beat("w", claimed.pk)
    stop = interruption()
    assert stop is not None and getattr(stop, "code", "") == "X_RUN_CANCELLED"
    beat.hold("w", claimed.pk)  # a new hold starts clean
    assert interruption() is None


@pytest.mark.postgres(reason="LISTEN/NOTIFY is PostgreSQL's")
@pytest.mark.django_db(transaction=True)
@pytest.mark.psycopg3(reason="LISTEN/NOTIFY is psycopg 3's")
def test_a_run_becoming_runnable_notifies_listeners() -> None:
    import psycopg
    from django.utils import timezone

    params = {
        k: v
        for k, v in connection.get_connection_params().items()
        if k not in {"cursor_factory", "context"}
    }
    run = jobs.noop.using(run_after=timedelta(hours=1)).enqueue()
    with psycopg.connect(autocommit=True, **params) as listener:
        listener.execute("LISTEN durable_jobs")
        JobRun.objects.filter(pk=run.pk).update(wake_at=timezone.now() + timedelta(hours=2))
        assert list(listener.notifies(timeout=0.2, stop_after=1)) == []  # still later
        JobRun.objects.filter(pk=run.pk).update(status="waiting", wake_at=timezone.now())
        got = list(listener.notifies(timeout=5, stop_after=1))
        assert [n.payload for n in got] == ["woken"]


@pytest.mark.django_db
def test_enqueue_many_runs_are_claimed_in_the_order_given(clock: FakeClock) -> None:
    jobs.add.enqueue_many([(i, 0) for i in range(6)])
    claimed = claim("w", now=clock.now(), lease=LEASE, limit=6)
    assert [run.args[0] for run in claimed] == list(range(6))
