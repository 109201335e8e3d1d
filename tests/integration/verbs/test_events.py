"""publish_event: transactional, validated, wakes waiting runs at once."""

from __future__ import annotations

import threading

import pytest
from django.db import connections, transaction

from django_durable_jobs import InvalidPayload, publish_event
from django_durable_jobs.db import dialect
from django_durable_jobs.db.postgresql.listen import Listener
from django_durable_jobs.engine.clock import FakeClock
from django_durable_jobs.models import Event, JobRun, RunStatus
from django_durable_jobs.verbs.waking import wake_late, wake_waiters
from tests.conftest import Driver
from tests.testapp import jobs


def park_onboarding(driver: Driver, clock: FakeClock, user_id: int) -> JobRun:
    run = jobs.onboarding.enqueue(user_id=user_id)
    driver.step(run)
    clock.advance("3d")
    driver.step(run)
    run.refresh_from_db()
    assert run.status == RunStatus.WAITING
    return run


@pytest.mark.django_db(transaction=True)
def test_publish_wakes_the_matching_waiter_without_waiting_for_the_poll(
    driver: Driver, clock: FakeClock
) -> None:
    mine = park_onboarding(driver, clock, 42)
    other = park_onboarding(driver, clock, 7)
    publish_event("order.paid", {"order_id": 1}, key="42")
    mine.refresh_from_db()
    other.refresh_from_db()
    assert mine.wake_at == clock.now()  # runnable now, not after the 30 s poll
    assert other.wake_at is not None and other.wake_at > clock.now()
    assert driver.step() is not None
    mine.refresh_from_db()
    assert mine.status == RunStatus.SUCCEEDED
    assert mine.result is not None and mine.result["order"] == {"order_id": 1}


@pytest.mark.django_db(transaction=True)
def test_rolled_back_publish_publishes_and_wakes_nothing(driver: Driver, clock: FakeClock) -> None:
    run = park_onboarding(driver, clock, 42)
    parked_until = run.wake_at

    def publish_then_fail() -> None:
        with transaction.atomic():
            publish_event("order.paid", {"order_id": 1}, key="42")
            raise RuntimeError("roll back")

    with pytest.raises(RuntimeError):
        publish_then_fail()
    assert not Event.objects.exists()
    run.refresh_from_db()
    assert run.wake_at == parked_until


@pytest.mark.django_db(transaction=True)
def test_event_published_between_check_and_park_still_wakes(
    driver: Driver, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = jobs.onboarding.enqueue(user_id=42)
    driver.step()
    clock.advance("3d")
    # The race: the event commits after the step looked (cursor taken) but before the
    # run is parked, so its wake-up finds no waiting run. Inject it at that moment:
    # just before the outcome is written, on whichever path writes it.
    from django_durable_jobs.db import faults

    original = faults.hit

    def publish_before_the_outcome(point: str, using: str) -> None:
        if point == "outcome.before":
            event = Event.objects.create(
                name="order.paid", key="42", payload={"order_id": 3}, published_at=clock.now()
            )
            assert wake_waiters(event) == 0  # nobody parked yet
        original(point, using)

    monkeypatch.setattr(faults, "hit", publish_before_the_outcome)
    driver.step()
    monkeypatch.undo()
    run.refresh_from_db()
    assert run.status == RunStatus.WAITING and run.wake_at == clock.now()
    driver.step()
    run.refresh_from_db()
    assert run.status == RunStatus.SUCCEEDED and run.result is not None
    assert run.result["order"] == {"order_id": 3}


@pytest.mark.django_db(transaction=True)
def test_a_publish_in_a_transaction_wakes_its_waiters_before_its_commit(
    driver: Driver, clock: FakeClock
) -> None:
    """Woken in the publisher's transaction: on PostgreSQL the NOTIFY goes out with its
    own commit. Nobody else sees the wake before the commit, a rollback undoes it."""
    run = park_onboarding(driver, clock, 42)
    with transaction.atomic():
        publish_event("order.paid", {"order_id": 1}, key="42")
        woken = JobRun.objects.get(pk=run.pk).wake_at
        assert woken is not None and woken <= clock.now()
    assert JobRun.objects.get(pk=run.pk).wake_at == woken  # the pass after it left it
    assert driver.step() is not None
    run.refresh_from_db()
    assert run.status == RunStatus.SUCCEEDED


def late_pass(event: Event, clock: FakeClock) -> None:
    """Where the publisher leaves the pass after its commit to the idle workers that
    hear of the event (PostgreSQL's LISTEN), what such a worker does."""
    if dialect.of("default").late_wake == "worker":
        assert wake_late([event.pk], clock.now()) >= 0


@pytest.mark.postgres
@pytest.mark.mariadb(reason="SQLite has one writer: no run parks while a publisher is open")
@pytest.mark.django_db(transaction=True)
def test_a_run_that_parks_before_the_publish_commits_is_woken_after_it(
    driver: Driver, clock: FakeClock
) -> None:
    run = park_onboarding(driver, clock, 42)
    parked_until = run.wake_at
    with transaction.atomic():
        # Not waiting when the publisher's transaction looks (still being parked)...
        JobRun.objects.filter(pk=run.pk).update(status=RunStatus.RUNNING)
        event = publish_event("order.paid", {"order_id": 1}, key="42")
        assert JobRun.objects.get(pk=run.pk).wake_at == parked_until
        # ... and parked before it commits: the pass after the commit wakes it.
        JobRun.objects.filter(pk=run.pk).update(status=RunStatus.WAITING)
    late_pass(event, clock)
    assert JobRun.objects.get(pk=run.pk).wake_at == clock.now()


@pytest.mark.postgres(reason="the publisher leaves the pass after its commit to LISTEN")
@pytest.mark.psycopg3(reason="LISTEN is psycopg 3's: through psycopg2 an idle worker polls")
@pytest.mark.django_db(transaction=True)
def test_a_listening_worker_hears_of_each_event_and_wakes_what_the_publisher_could_not(
    driver: Driver, clock: FakeClock
) -> None:
    run = park_onboarding(driver, clock, 42)
    parked_until = run.wake_at
    listener = Listener("default")
    try:
        listener.wait(0.01)  # connected and listening before the publish
        with transaction.atomic():
            JobRun.objects.filter(pk=run.pk).update(status=RunStatus.RUNNING)
            event = publish_event("order.paid", {"order_id": 1}, key="42")
            JobRun.objects.filter(pk=run.pk).update(status=RunStatus.WAITING)
        # The publisher wrote nothing after its commit...
        assert JobRun.objects.get(pk=run.pk).wake_at == parked_until
        # ... the worker hears of the event and does the pass.
        assert listener.wait(10)
        assert listener.take_events() == {event.pk}
        assert listener.take_events() == set()
    finally:
        listener.close()
    assert wake_late([event.pk], clock.now()) == 1
    assert JobRun.objects.get(pk=run.pk).wake_at == clock.now()
    assert wake_late([event.pk], clock.now()) == 0  # a second worker's pass: nothing left


@pytest.mark.postgres(reason="SQLite has one writer; the race needs row locks")
@pytest.mark.mariadb
@pytest.mark.django_db(transaction=True)
def test_a_publish_does_not_wait_for_a_waiter_another_transaction_holds(
    driver: Driver, clock: FakeClock
) -> None:
    run = park_onboarding(driver, clock, 42)
    parked_until = run.wake_at
    locked, release = threading.Event(), threading.Event()

    def hold() -> None:
        try:
            with transaction.atomic():
                list(JobRun.objects.select_for_update().filter(pk=run.pk))
                locked.set()
                release.wait(timeout=30)
        finally:
            connections.close_all()

    holder = threading.Thread(target=hold)
    holder.start()
    try:
        assert locked.wait(timeout=10)
        with transaction.atomic():
            # Registered first, so it runs before the pass after the commit, which waits.
            transaction.on_commit(release.set)
            publish_event("order.paid", {"order_id": 1}, key="42")  # does not wait
            assert JobRun.objects.get(pk=run.pk).wake_at == parked_until
    finally:
        release.set()
        holder.join(timeout=30)
    late_pass(Event.objects.get(), clock)
    assert JobRun.objects.get(pk=run.pk).wake_at == clock.now()


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("event", "payload", "key", "error"),
    [
        ("", None, None, ValueError),
        (42, None, None, ValueError),
        ("x", None, 42, TypeError),
        ("x", float("nan"), None, InvalidPayload),
        ("x", {"a": {1, 2}}, None, InvalidPayload),
    ],
)
def test_bad_input_writes_nothing(
    event: object, payload: object, key: object, error: type[Exception]
) -> None:
    with pytest.raises(error):
        publish_event(event, payload, key=key)  # type: ignore[arg-type]
    assert not Event.objects.exists()


@pytest.mark.django_db
def test_a_key_too_long_is_a_name_error_and_jobs_publish_says_it_in_one_line() -> None:
    """``jobs publish --key <300 chars>`` printed a TypeError's traceback."""
    from django.core.management import call_command
    from django.core.management.base import CommandError

    from django_durable_jobs import InvalidName, publish_event

    with pytest.raises(InvalidName, match="key is 300 characters, over the 255"):
        publish_event("x", key="k" * 300)
    with pytest.raises(CommandError, match="key is 300 characters, over the 255"):
        call_command("jobs", "publish", "x", "--key", "k" * 300)
    with pytest.raises(TypeError, match="key must be a string, got 7"):
        publish_event("x", key=7)  # type: ignore[arg-type]
