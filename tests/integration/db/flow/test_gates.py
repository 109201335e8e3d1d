"""RateLimit, Debounce and CancelOn on the fake clock."""

from __future__ import annotations

import threading
from datetime import timedelta
from typing import Any

import pytest
from django.core.management import call_command
from django.db import transaction
from django.urls import reverse

from django_durable_jobs import Debounce, RateLimit, job, publish_event, signals
from django_durable_jobs.db.claims import claim
from django_durable_jobs.definitions.registry import unregister
from django_durable_jobs.engine.clock import FakeClock
from django_durable_jobs.engine.timeouts import TimeGuard
from django_durable_jobs.models import JobRun, RunStatus
from django_durable_jobs.worker.execution import execute
from tests.conftest import Driver
from tests.testapp import flow_jobs
from tests.testapp.models import Effect

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize(
    ("options", "words"),
    [
        ({"rate_limit": RateLimit(1, per="1h", key="nope")}, ["unit.gate", "'nope'"]),
        ({"rate_limit": RateLimit(0, per="1h")}, ["rate_limit", "0"]),
        ({"debounce": Debounce("0s")}, ["debounce", "zero"]),
        ({"debounce": Debounce("5m", timeout="soon")}, ["soon"]),
        ({"debounce": "5m"}, ["Debounce"]),
        ({"cancel_on": ["order.paid"]}, ["CancelOn"]),
    ],
)
def test_bad_gates_fail_at_decoration(options: dict[str, Any], words: list[str]) -> None:
    with pytest.raises((ValueError, TypeError)) as excinfo:

        @job(name="unit.gate", **options)
        def gate(ctx: Any, user_id: int) -> None: ...

    unregister("unit.gate")
    for word in words:
        assert word in str(excinfo.value)


# -- RateLimit ------------------------------------------------------------------------


def test_rate_limit_skips_the_enqueue_over_the_limit(driver: Driver, clock: FakeClock) -> None:
    sent: list[str] = []

    def on_enqueued(run: JobRun, **kwargs: Any) -> None:
        sent.append(f"enqueued:{run.status}")

    def on_skipped(run: JobRun, **kwargs: Any) -> None:
        sent.append(f"skipped:{run.status}")

    signals.run_enqueued.connect(on_enqueued)
    signals.run_skipped.connect(on_skipped)
    try:
        first = flow_jobs.welcome_once.enqueue(7)
        again = flow_jobs.welcome_once.enqueue(7)
        other = flow_jobs.welcome_once.enqueue(8)
    finally:
        signals.run_enqueued.disconnect(on_enqueued)
        signals.run_skipped.disconnect(on_skipped)
    assert sent == ["enqueued:queued", "skipped:skipped", "enqueued:queued"]
    assert again.pk != first.pk and again.status == RunStatus.SKIPPED
    assert again.finished_at == clock.now()
    driver.drain()
    assert set(Effect.objects.values_list("name", flat=True)) == {"welcome:7", "welcome:8"}
    assert JobRun.objects.get(pk=again.pk).status == RunStatus.SKIPPED  # never executed
    assert other.status == RunStatus.QUEUED
    clock.advance(timedelta(hours=1))
    assert flow_jobs.welcome_once.enqueue(7).status == RunStatus.QUEUED  # a new period


def test_skipped_runs_are_listed_by_status(capsys: Any) -> None:
    queued = flow_jobs.welcome_once.enqueue(7)
    skipped = flow_jobs.welcome_once.enqueue(7)
    call_command("jobs", "list", "--status", "skipped")
    out = capsys.readouterr().out
    assert str(skipped.pk)[:8] in out and out.count("skipped") >= 1
    assert str(queued.pk) not in out  # the run that passed the limit is not skipped


def test_the_admin_badges_and_filters_skipped_runs(admin_client: Any) -> None:
    queued = flow_jobs.welcome_once.enqueue(7)
    skipped = flow_jobs.welcome_once.enqueue(7)
    listing = reverse("admin:django_durable_jobs_jobrun_changelist")
    page = admin_client.get(listing).content.decode()
    assert '<span class="djdj-badge djdj-badge--skipped">skipped</span>' in page
    assert 'href="?status__exact=skipped"' in page  # the status filter offers it
    filtered = admin_client.get(listing, {"status__exact": "skipped"}).content.decode()
    assert f'<span class="djdj-id">{str(skipped.pk)[:8]}</span></a>' in filtered
    assert f'<span class="djdj-id">{str(queued.pk)[:8]}</span></a>' not in filtered
    run_page = admin_client.get(
        reverse("admin:django_durable_jobs_jobrun_change", args=[skipped.pk])
    ).content.decode()
    assert "djdj-badge--skipped" in run_page


# -- Debounce ---------------------------------------------------------------------------


def test_debounce_returns_one_run_with_the_latest_arguments(
    driver: Driver, clock: FakeClock
) -> None:
    start = clock.now()
    first = flow_jobs.digest.enqueue(1, ["a"])
    assert first.wake_at == start + timedelta(minutes=5)
    clock.advance(timedelta(minutes=4))
    second = flow_jobs.digest.enqueue(1, ["a", "b"])
    assert second.pk == first.pk and second.args == [1, ["a", "b"]]
    assert second.wake_at == clock.now() + timedelta(minutes=5)  # the quiet period restarts
    other = flow_jobs.digest.enqueue(2, ["x"])
    assert other.pk != first.pk
    clock.advance(timedelta(minutes=4, seconds=59))
    assert driver.step(first) is None  # still inside the quiet period
    clock.advance(timedelta(seconds=1))
    driver.drain()
    effects = sorted(Effect.objects.values_list("name", flat=True))
    assert effects == ["digest:1:a,b", "digest:2:x"]
    assert JobRun.objects.filter(job_name="tests.digest").count() == 2


def test_debounce_is_capped_by_its_timeout(clock: FakeClock) -> None:
    start = clock.now()
    run = flow_jobs.digest.enqueue(1, ["a"])
    for n in range(20):  # an edit every 4 minutes, for 80 minutes
        clock.advance(timedelta(minutes=4))
        again = flow_jobs.digest.enqueue(1, [str(n)])
        if clock.now() - start <= timedelta(minutes=56):
            assert again.pk == run.pk
    run.refresh_from_db()
    assert run.wake_at == start + timedelta(hours=1)  # the run's start was capped
    # The enqueues after the cap made the run runnable; they still joined it until
    # a worker started it.


def test_a_started_debounced_run_is_not_changed(driver: Driver, clock: FakeClock) -> None:
    first = flow_jobs.digest.enqueue(1, ["a"])
    clock.advance(timedelta(minutes=5))
    driver.step(first)
    later = flow_jobs.digest.enqueue(1, ["b"])
    assert later.pk != first.pk and later.status == RunStatus.QUEUED


# -- CancelOn -----------------------------------------------------------------------------


def test_cancel_on_cancels_matching_unfinished_runs(driver: Driver, clock: FakeClock) -> None:
    sleeping = flow_jobs.dunning.enqueue(42)
    other = flow_jobs.dunning.enqueue(43)
    driver.drain()  # both sleep for three days
    queued = flow_jobs.dunning.enqueue(invoice_id=42)
    clock.advance(timedelta(seconds=1))
    publish_event("invoice.paid", {"invoice": 42}, key="42")
    statuses = dict(JobRun.objects.filter(job_name="tests.dunning").values_list("id", "status"))
    assert statuses == {
        sleeping.pk: RunStatus.CANCELLED,
        queued.pk: RunStatus.CANCELLED,
        other.pk: RunStatus.SLEEPING,
    }
    run = JobRun.objects.get(pk=sleeping.pk)
    assert run.error_code == "X_RUN_CANCELLED" and "invoice.paid" in run.error
    handlers = JobRun.objects.filter(job_name="tests.failure_handler")
    assert handlers.count() == 2  # on_failure runs for cancelled runs too
    later = flow_jobs.dunning.enqueue(42)  # enqueued after the event: not cancelled
    assert later.status == RunStatus.QUEUED


def test_cancel_on_cancels_a_waiting_run(driver: Driver, clock: FakeClock) -> None:
    waiting = flow_jobs.dunning.enqueue(42, wait=True)
    driver.drain()
    assert JobRun.objects.get(pk=waiting.pk).status == RunStatus.WAITING
    clock.advance(timedelta(seconds=1))
    publish_event("invoice.paid", key="42")
    run = JobRun.objects.get(pk=waiting.pk)
    assert run.status == RunStatus.CANCELLED and run.error_code == "X_RUN_CANCELLED"
    assert "invoice.paid" in run.error and run.lease_owner == ""
    # The event it waited for, published now, does not bring it back.
    publish_event("customer.replied", key="42")
    clock.advance(timedelta(seconds=1))
    driver.drain()
    assert JobRun.objects.get(pk=waiting.pk).status == RunStatus.CANCELLED
    assert not Effect.objects.filter(name="charged").exists()
    assert Effect.objects.filter(name=f"handled:{waiting.pk}").count() == 1  # on_failure


def test_cancel_on_without_match_cancels_every_run(clock: FakeClock) -> None:
    runs = [flow_jobs.dunning.enqueue(n) for n in range(3)]
    publish_event("customer.deleted", key="anything")
    assert {r.status for r in JobRun.objects.filter(pk__in=[r.pk for r in runs])} == {
        RunStatus.CANCELLED
    }


def test_cancel_on_rolls_back_with_the_publisher(clock: FakeClock) -> None:
    run = flow_jobs.dunning.enqueue(42)
    with transaction.atomic():
        publish_event("invoice.paid", key="42")
        transaction.set_rollback(True)
    assert JobRun.objects.get(pk=run.pk).status == RunStatus.QUEUED


def test_a_running_run_stops_at_its_next_step(clock: FakeClock) -> None:
    run = flow_jobs.dunning.enqueue(42)
    [claimed] = claim("w", now=clock.now(), lease=timedelta(minutes=1))
    publish_event("invoice.paid", key="42")
    cancelled = JobRun.objects.get(pk=run.pk)
    assert cancelled.status == RunStatus.CANCELLED and cancelled.lease_owner == "w"

    def interrupt() -> BaseException | None:  # what the worker's heartbeat answers
        from django_durable_jobs.exceptions import RunCancelled

        return RunCancelled("the run was cancelled while it executed")

    execute(
        claimed, clock=clock, owner="w", guard=TimeGuard(use_signals=False), interrupt=interrupt
    )
    cancelled.refresh_from_db()
    assert cancelled.status == RunStatus.CANCELLED and cancelled.lease_owner == ""
    assert not Effect.objects.filter(name="charged").exists()


@pytest.mark.postgres(reason="SQLite has one writer; the race needs row locks")
@pytest.mark.mariadb
@pytest.mark.django_db(transaction=True)
def test_concurrent_enqueues_pass_a_rate_limit_once(clock: FakeClock) -> None:
    from django.db import connections

    # A key never seen before: its lock row is created by the racing enqueues.
    barrier, statuses = threading.Barrier(4), []

    def enqueuer() -> None:
        try:
            barrier.wait(timeout=10)
            with transaction.atomic():
                statuses.append(flow_jobs.welcome_once.enqueue(7).status)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=enqueuer) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert sorted(statuses) == ["queued", "skipped", "skipped", "skipped"]


# -- idempotency keys and children of gated jobs ------------------------------------------


@pytest.mark.parametrize("gate", ["rate_limit", "debounce"])
def test_an_idempotency_key_gives_back_its_run_past_a_gate(
    driver: Driver, clock: FakeClock, gate: str
) -> None:
    """The second enqueue with the key raised IntegrityError (the gate's plain insert);
    for a debounce, once the first run had left ``queued``."""
    enqueued: list[JobRun] = []
    signals.run_enqueued.connect(
        lambda run, **kw: enqueued.append(run), weak=False, dispatch_uid="t"
    )
    try:
        if gate == "rate_limit":
            first = flow_jobs.welcome_once.using(idempotency_key="k").enqueue(1)
            again = flow_jobs.welcome_once.using(idempotency_key="k").enqueue(1)
        else:
            first = flow_jobs.digest.using(idempotency_key="k").enqueue(1, ["a"])
            clock.advance(timedelta(minutes=5))
            driver.step(first)  # started: debounce would make a new run
            again = flow_jobs.digest.using(idempotency_key="k").enqueue(1, ["b"])
    finally:
        signals.run_enqueued.disconnect(dispatch_uid="t")
    assert again.pk == first.pk and JobRun.objects.count() == 1
    assert [run.pk for run in enqueued] == [first.pk]  # announced once


def test_an_idempotency_key_announces_its_run_once_without_a_gate() -> None:
    enqueued: list[JobRun] = []
    signals.run_enqueued.connect(
        lambda run, **kw: enqueued.append(run), weak=False, dispatch_uid="t"
    )
    try:
        runs = [flow_jobs.global_limit.using(idempotency_key="k").enqueue(1) for _ in range(2)]
    finally:
        signals.run_enqueued.disconnect(dispatch_uid="t")
    assert runs[0].pk == runs[1].pk and [run.pk for run in enqueued] == [runs[0].pk]


def test_invoking_a_gated_job_fails_the_parent_at_once(driver: Driver) -> None:
    """A rate-limited child was skipped and its parent waited until the step's timeout;
    a debounced one handed two parents one child's result."""
    parent = flow_jobs.invokes_gated.enqueue(1)
    driver.drain()
    parent.refresh_from_db()
    assert parent.status == RunStatus.FAILED and parent.attempt == 1
    assert parent.error_code == "X_STEP_USAGE"
    assert "invoke of job 'tests.welcome_once': it has a rate_limit or debounce" in parent.error
    assert not JobRun.objects.filter(parent=parent).exists()
