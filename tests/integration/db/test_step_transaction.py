"""Atomic steps on a real database (``ctx.step.atomic``, db/step_transaction.py): the
step function's writes and the step's record commit together or not at all, so each
write takes effect exactly once: replayed, retried, refused, cancelled or fenced off."""

from __future__ import annotations

import io
import json
from typing import Any

import pytest
from django.db import connection

from django_durable_jobs.db.store import LeaseLost, OrmStepStore
from django_durable_jobs.engine.clock import FakeClock
from django_durable_jobs.engine.records import RecordedStep
from django_durable_jobs.engine.sync_steps import Steps
from django_durable_jobs.engine.vocabulary import StepKind
from django_durable_jobs.models import JobRun, RunStatus, StepRecord, StepStatus
from django_durable_jobs.verbs import runs
from tests.conftest import Driver
from tests.testapp import atomic_jobs
from tests.testapp.models import Effect

pytestmark = pytest.mark.django_db(transaction=True, databases=["default", "other"])


@pytest.fixture(autouse=True)
def _counters() -> Any:
    atomic_jobs.CALLS.clear()
    atomic_jobs.FAIL.clear()
    yield
    atomic_jobs.FAIL.clear()


def effects(run: JobRun) -> list[str]:
    return sorted(Effect.objects.filter(run_id=str(run.pk)).values_list("name", flat=True))


@pytest.mark.parametrize(
    "job", [atomic_jobs.checkout, atomic_jobs.acheckout], ids=["sync", "async"]
)
def test_a_retry_replays_the_atomic_step_instead_of_writing_again(driver: Driver, job: Any) -> None:
    name = "pay" if job is atomic_jobs.checkout else "apay"
    ship = "ship" if job is atomic_jobs.checkout else "aship"
    atomic_jobs.FAIL[ship] = 1  # the step after the atomic one fails once
    run = job.enqueue()
    driver.drain()
    run.refresh_from_db()
    assert (run.status, run.result, run.attempt) == (RunStatus.SUCCEEDED, f"paid:{name}", 2)
    assert atomic_jobs.CALLS[name] == 1  # replayed on the retry, not called
    assert effects(run) == [name]
    step = StepRecord.objects.get(run=run, name="pay")
    assert (step.kind, step.status, step.output) == (
        StepKind.ATOMIC,
        StepStatus.COMPLETED,
        f"paid:{name}",
    )


def test_a_function_that_raises_leaves_none_of_its_writes(driver: Driver) -> None:
    atomic_jobs.FAIL["pay"] = 2  # writes its row, then raises, twice
    run = atomic_jobs.checkout.enqueue()
    driver.drain()
    run.refresh_from_db()
    assert run.status == RunStatus.SUCCEEDED and run.attempt == 3
    assert atomic_jobs.CALLS["pay"] == 3  # ran three times ...
    assert effects(run) == ["pay"]  # ... and its row exists once
    step = StepRecord.objects.get(run=run, name="pay")
    assert step.status == StepStatus.COMPLETED and step.attempts == 3


def test_a_failure_is_recorded_with_its_error_after_the_rollback(driver: Driver) -> None:
    atomic_jobs.FAIL["pay"] = 3  # more failures than attempts
    run = atomic_jobs.checkout.enqueue()
    driver.drain()
    run.refresh_from_db()
    assert run.status == RunStatus.FAILED and "card declined" in run.error
    assert effects(run) == []
    step = StepRecord.objects.get(run=run, name="pay")
    assert (step.status, step.error_type) == (StepStatus.FAILED, "builtins.ValueError")


@pytest.mark.parametrize("catch", [False, True], ids=["raised", "caught-by-the-function"])
def test_a_write_through_another_database_is_refused_and_rolls_the_step_back(
    driver: Driver, catch: bool
) -> None:
    run = atomic_jobs.elsewhere.enqueue(catch=catch)
    driver.drain()
    run.refresh_from_db()
    assert (run.status, run.error_code) == (RunStatus.FAILED, "X_STEP_USAGE")
    assert "a write through the database 'other' inside ctx.step.atomic" in run.error
    assert effects(run) == []  # the jobs database's write rolled back with it
    from django.db import connections

    with connections["other"].cursor() as cursor:  # and nothing reached the other
        cursor.execute("SELECT count(*) FROM sqlite_master WHERE name = 'escaped'")
        assert cursor.fetchone() == (0,)


def test_a_read_through_another_database_is_allowed(driver: Driver) -> None:
    run = atomic_jobs.reads_elsewhere.enqueue()
    driver.drain()
    run.refresh_from_db()
    assert (run.status, run.result) == (RunStatus.SUCCEEDED, 42)
    assert effects(run) == ["read"]


def test_on_commit_callbacks_run_after_the_commit_and_a_nested_atomic_is_a_savepoint(
    driver: Driver,
) -> None:
    run = atomic_jobs.callbacks.enqueue()
    driver.drain()
    run.refresh_from_db()
    # The callback had not run inside the function; it ran once the step committed.
    assert (run.status, run.result) == (RunStatus.SUCCEEDED, False)
    assert effects(run) == ["after-commit", "kept"]  # the savepoint's row rolled back


def test_an_async_function_is_refused(driver: Driver) -> None:
    run = atomic_jobs.async_function.enqueue()
    driver.drain()
    run.refresh_from_db()
    assert (run.status, run.error_code) == (RunStatus.FAILED, "X_STEP_USAGE")
    assert "takes a plain function" in run.error


def _steps(run: JobRun, owner: str | None, clock: FakeClock) -> Steps:
    return Steps(
        run_id=str(run.pk),
        job_name=run.job_name,
        store=OrmStepStore(owner=owner),
        events=None,  # no waits here
        clock=clock,
    )


def test_a_lost_lease_commits_nothing(clock: FakeClock) -> None:
    run = atomic_jobs.checkout.enqueue()
    JobRun.objects.filter(pk=run.pk).update(status=RunStatus.RUNNING, lease_owner="another")
    steps = _steps(run, "me", clock)
    with pytest.raises(LeaseLost):
        steps.atomic("pay", atomic_jobs.pay, "pay", str(run.pk))
    assert atomic_jobs.CALLS["pay"] == 1 and effects(run) == []
    assert not StepRecord.objects.filter(run=run).exists()


def test_a_run_cancelled_meanwhile_keeps_none_of_the_steps_writes(clock: FakeClock) -> None:
    run = atomic_jobs.checkout.enqueue()
    JobRun.objects.filter(pk=run.pk).update(status=RunStatus.RUNNING, lease_owner="me")

    def pay_then_cancel(run_id: str) -> str:
        Effect.objects.create(name="pay", run_id=run_id)
        # An operator cancels the run while the function works (its own connection on a
        # server database; SQLite's single writer is this transaction: the same one).
        JobRun.objects.filter(pk=run_id).update(status=RunStatus.CANCELLED)
        return "paid"

    from django_durable_jobs.exceptions import RunCancelled

    with pytest.raises(RunCancelled, match="is not recorded"):
        _steps(run, "me", clock).atomic("pay", pay_then_cancel, str(run.pk))
    assert effects(run) == []
    # The cancel itself rolled back with the step here (it was written inside it):
    # what matters is that no record claims the step's writes happened.
    assert not StepRecord.objects.filter(run=run, status=StepStatus.COMPLETED).exists()


def paid_record(run: JobRun, clock: FakeClock) -> RecordedStep:
    """The completed record of ``run``'s atomic step "pay"."""
    return RecordedStep(
        run_id=str(run.pk),
        name="pay",
        kind=StepKind.ATOMIC,
        status=StepStatus.COMPLETED,
        started_at=clock.now(),
        completed_at=clock.now(),
        attempts=1,
        output="paid",
    )


def test_a_record_rolled_back_is_forgotten_by_the_store(clock: FakeClock) -> None:
    """A step retried in the same process after a rollback inserts its record again
    (the store does not believe the rolled-back row exists)."""
    run = atomic_jobs.checkout.enqueue()
    JobRun.objects.filter(pk=run.pk).update(status=RunStatus.RUNNING, lease_owner="me")
    store = OrmStepStore(owner="me")
    record = paid_record(run, clock)

    def put_then_fail() -> None:
        with store.step_transaction():
            store.put(record)
            raise ValueError("roll back")

    with pytest.raises(ValueError, match="roll back"):
        put_then_fail()
    assert not StepRecord.objects.filter(run=run).exists()
    with store.step_transaction() as done:
        store.put(record)
    assert done.committed and StepRecord.objects.filter(run=run, name="pay").count() == 1


@pytest.mark.postgres(reason="a second session's row lock: a server database")
@pytest.mark.mariadb
def test_a_worker_taking_the_run_over_waits_for_the_steps_commit(clock: FakeClock) -> None:
    """The record's fence locks the run's row: another session's UPDATE of the run (a
    worker taking it over) waits until the step committed, then sees its record."""
    import threading

    from django.db import connections

    run = atomic_jobs.checkout.enqueue()
    JobRun.objects.filter(pk=run.pk).update(status=RunStatus.RUNNING, lease_owner="me")
    store = OrmStepStore(owner="me")
    record = paid_record(run, clock)
    seen: list[int] = []

    def take_over() -> None:
        try:
            JobRun.objects.filter(pk=run.pk).update(lease_owner="other")
            seen.append(StepRecord.objects.filter(run=run, name="pay").count())
        finally:
            connections.close_all()

    with store.step_transaction():
        store.put(record)  # the run's row is locked from here to the commit
        other = threading.Thread(target=take_over)
        other.start()
        other.join(timeout=1)
        assert other.is_alive()  # waiting for this transaction
    other.join(timeout=30)
    assert seen == [1]  # it saw the committed record once it got the row
    assert connection.vendor in {"postgresql", "mysql"}


def test_the_timeline_and_jobs_show_mark_an_atomic_step(driver: Driver, admin_client: Any) -> None:
    from django.core.management import call_command
    from django.urls import reverse

    run = atomic_jobs.checkout.enqueue()
    driver.drain()
    page = admin_client.get(reverse("admin:django_durable_jobs_jobrun_change", args=[run.pk]))
    assert page.status_code == 200
    html = page.content.decode()
    assert html.count('class="djdj-atomic"') == 1  # "pay", not "ship"
    out = io.StringIO()
    call_command("jobs", "show", str(run.pk), "--json", stdout=out)
    kinds = {step["name"]: step["kind"] for step in json.loads(out.getvalue())["steps"]}
    assert kinds == {"pay": "atomic", "ship": "run"}
    out = io.StringIO()
    call_command("jobs", "show", str(run.pk), stdout=out)
    assert "pay (atomic)" in out.getvalue() and "ship (atomic)" not in out.getvalue()


def test_replay_from_an_atomic_step_runs_it_again_once(driver: Driver) -> None:
    """An operator's replay from the step forgets its record: the function runs again
    (its writes happen a second time, as asked), and the next replay of the run does
    not run it a third time."""
    run = atomic_jobs.checkout.enqueue()
    driver.drain()
    runs.replay_from(run.pk, "pay")
    driver.drain()
    run.refresh_from_db()
    assert run.status == RunStatus.SUCCEEDED
    assert atomic_jobs.CALLS["pay"] == 2 and effects(run) == ["pay", "pay"]
    atomic_jobs.FAIL["ship"] = 1
    runs.replay_from(run.pk, "ship")  # a later step: "pay" replays from its record
    driver.drain()
    run.refresh_from_db()
    assert run.status == RunStatus.SUCCEEDED and atomic_jobs.CALLS["pay"] == 2


def test_inside_a_projects_own_transaction_the_step_commits_with_it(clock: FakeClock) -> None:
    """A request under ATOMIC_REQUESTS (or any caller's ``atomic()``) that runs a step
    inline: the step's transaction is a savepoint of the caller's, so the step's rows
    and record commit with the request, or roll back with it."""
    from django.db import transaction

    run = atomic_jobs.checkout.enqueue()
    seen: list[list[str]] = []

    def request_that_fails() -> None:
        with transaction.atomic():
            steps = _steps(run, None, clock)  # inline: no worker's lease
            steps.atomic("pay", atomic_jobs.pay, "pay", str(run.pk))
            seen.append(effects(run))
            raise RuntimeError("the request fails")

    with pytest.raises(RuntimeError, match="the request fails"):
        request_that_fails()
    assert seen == [["pay"]]  # written inside the request ...
    assert effects(run) == [] and not StepRecord.objects.filter(run=run).exists()  # ... undone
