"""Events end to end: on_event jobs, step.publish, step.invoke, publish_on, signals."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from django.db import transaction
from django.db.models.signals import post_save
from django.dispatch import Signal

from django_durable_jobs import publish_event, publish_on, signals
from django_durable_jobs.engine.clock import FakeClock
from django_durable_jobs.models import Event, JobRun, RunStatus
from tests.conftest import Driver
from tests.testapp import jobs
from tests.testapp.event_jobs import parent, publisher, waiter
from tests.testapp.models import Effect


@pytest.mark.django_db
def test_on_event_job_starts_one_run_per_event(driver: Driver) -> None:
    first = publish_event("user.signed_up", {"user": 1})
    publish_event("user.signed_up", {"user": 2})
    publish_event("user.left", {"user": 3})
    runs = JobRun.objects.filter(job_name="tests.on_signup")
    assert runs.count() == 2
    assert sorted(r.args[0]["user"] for r in runs) == [1, 2]
    assert {r.idempotency_key for r in runs} >= {f"event:{first.id}"}
    driver.drain()
    assert set(runs.values_list("status", flat=True)) == {RunStatus.SUCCEEDED}


@pytest.mark.django_db(transaction=True)
def test_on_event_run_rolls_back_with_the_event() -> None:
    def publish_then_fail() -> None:
        with transaction.atomic():
            publish_event("user.signed_up", {"user": 1})
            raise RuntimeError

    with pytest.raises(RuntimeError):
        publish_then_fail()
    assert not JobRun.objects.exists() and not Event.objects.exists()


@pytest.mark.django_db
def test_step_publish_publishes_exactly_once_across_retries(driver: Driver) -> None:
    jobs.FAIL_ONCE.add("after-publish")
    run = publisher.enqueue(user=7)
    driver.step(run)  # publishes, then "after" fails
    run.refresh_from_db()
    assert run.status == RunStatus.QUEUED
    driver.step(run)  # retry: the publish step replays
    run.refresh_from_db()
    assert run.status == RunStatus.SUCCEEDED
    events = Event.objects.filter(name="user.signed_up")
    assert events.count() == 1 and run.result == events.get().id
    assert JobRun.objects.filter(job_name="tests.on_signup").count() == 1


@pytest.mark.django_db(transaction=True)
def test_invoke_runs_a_child_and_wakes_the_parent(driver: Driver, clock: FakeClock) -> None:
    run = parent.enqueue(4)
    driver.step(run)
    run.refresh_from_db()
    assert run.status == RunStatus.WAITING
    child = JobRun.objects.get(parent=run)
    assert child.job_name == "tests.child" and child.args == [4]
    driver.step(child)
    run.refresh_from_db()
    assert run.wake_at == clock.now()  # woken by the child, not by the poll
    driver.step(run)
    run.refresh_from_db()
    assert run.status == RunStatus.SUCCEEDED and run.result == {"child": 40}
    assert JobRun.objects.filter(parent=run).count() == 1  # replays never start another


@pytest.mark.django_db(transaction=True)
def test_invoke_raises_the_childs_failure(driver: Driver) -> None:
    jobs.FAIL_ONCE.add("child")  # the child job checks the set; never consumed here
    run = parent.enqueue(5)
    driver.drain()
    run.refresh_from_db()
    assert run.status == RunStatus.FAILED and run.error_code == "X_CHILD_FAILED"
    assert "child refuses 5" in run.error
    assert not Effect.objects.filter(name="after-child").exists()


@pytest.mark.django_db(transaction=True)
def test_invoke_times_out(driver: Driver, clock: FakeClock) -> None:
    run = parent.using(queue="parents").enqueue(6)  # the child runs on "default"
    driver.step(run)
    # The child never becomes runnable within the parent's timeout.
    JobRun.objects.filter(parent=run).update(
        status="sleeping", wake_at=clock.now() + timedelta(days=30)
    )
    clock.advance("1h")
    driver.drain()
    run.refresh_from_db()
    assert run.status == RunStatus.FAILED and run.error_code == "X_JOB_TIMEOUT"


@pytest.fixture
def paid_effects() -> Iterator[Any]:
    receiver = publish_on(
        post_save,
        sender=Effect,
        event="effect.paid",
        key=lambda instance, **kw: instance.run_id or None,
        payload=lambda instance, created, **kw: {"name": instance.name, "created": created},
        when=lambda instance, **kw: instance.name.startswith("paid"),
    )
    yield receiver
    post_save.disconnect(
        receiver,
        sender=Effect,
        dispatch_uid=f"django_durable_jobs:effect.paid:{id(post_save)}:testapp.Effect",
    )


@pytest.mark.django_db(transaction=True)
def test_publish_on_model_save(paid_effects: Any) -> None:
    publish_on(  # a second identical call does not connect a second receiver
        post_save,
        sender=Effect,
        event="effect.paid",
        key=lambda instance, **kw: instance.run_id or None,
        when=lambda instance, **kw: instance.name.startswith("paid"),
    )
    Effect.objects.create(name="unpaid")

    def save_then_fail() -> None:
        with transaction.atomic():
            Effect.objects.create(name="paid-but-rolled-back", run_id="k1")
            raise RuntimeError

    with pytest.raises(RuntimeError):
        save_then_fail()
    assert not Event.objects.exists()
    Effect.objects.create(name="paid-1", run_id="k2")
    event = Event.objects.get()
    assert (event.name, event.key, event.payload) == (
        "effect.paid",
        "k2",
        {"name": "paid-1", "created": True},
    )


@pytest.mark.django_db(transaction=True)
def test_publish_on_custom_signal_wakes_a_waiting_run(driver: Driver, clock: FakeClock) -> None:
    shipped = Signal()
    publish_on(
        shipped,
        event="keyed",
        key=lambda order_id, **kw: str(order_id),
        payload=lambda order_id, **kw: {"order": order_id},
    )
    run = waiter.enqueue("9")
    driver.step(run)
    shipped.send(sender=None, order_id=9)
    run.refresh_from_db()
    assert run.wake_at == clock.now()
    driver.step(run)
    run.refresh_from_db()
    assert run.result == {"order": 9}


@pytest.mark.django_db(transaction=True)
def test_app_signals_are_sent(driver: Driver, clock: FakeClock) -> None:
    seen: list[str] = []
    names = [
        "run_enqueued",
        "run_started",
        "step_completed",
        "run_suspended",
        "run_succeeded",
        "run_failed",
        "event_published",
    ]
    receivers = {}
    for name in names:

        def receiver(sender: Any, name: str = name, **kwargs: Any) -> None:
            seen.append(name)

        receivers[name] = receiver
        getattr(signals, name).connect(receiver)
    try:
        run = jobs.onboarding.enqueue(user_id=1)
        driver.step(run)
        clock.advance("3d")
        driver.step(run)
        publish_event("order.paid", {"order": 1}, key="1")
        driver.step(run)
        jobs.bad_output.enqueue()
        driver.drain()
    finally:
        for name, receiver in receivers.items():
            getattr(signals, name).disconnect(receiver)
    assert set(seen) == set(names)
    assert seen.index("event_published") > seen.index("run_suspended")
