"""Edge inputs end to end: durations that overflow the calendar,
values no database can store (lone surrogates, deep nesting, NUL in names) and options
that slip past validation. Each must be a typed error, never a bare Python or database
error, and a run that hits one fails at once instead of being retried."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.core.management import CommandError, call_command

from django_durable_jobs.engine.clock import FakeClock
from django_durable_jobs.engine.serialization import MAX_DEPTH
from django_durable_jobs.exceptions import InvalidDuration, InvalidName, InvalidPayload
from django_durable_jobs.models import Event, JobRun, RunStatus, StepRecord
from django_durable_jobs.verbs import runs
from django_durable_jobs.verbs.events import publish_event
from tests.conftest import Driver
from tests.testapp import input_jobs, jobs


def failed_once(driver: Driver, run: JobRun) -> JobRun:
    """Execute ``run`` once; it must have failed for good, without a retry."""
    driver.step(run)
    run.refresh_from_db()
    assert run.status == RunStatus.FAILED, (run.status, run.error_type, run.error)
    assert run.attempt == 1
    return run


# -- 8. durations that overflow ---------------------------------------------------------


@pytest.mark.django_db
@pytest.mark.parametrize(
    "which", [input_jobs.long_sleep, input_jobs.long_wait, input_jobs.long_invoke]
)
def test_a_step_duration_past_the_calendar_fails_the_run_with_duration_invalid(
    driver: Driver, which: Any
) -> None:
    run = failed_once(driver, which.enqueue())
    assert run.error_code == "X_DURATION_INVALID"
    assert "3000000d" in run.error and "9999" in run.error


@pytest.mark.django_db
def test_run_after_past_the_calendar_is_duration_invalid_and_writes_nothing(
    clock: FakeClock,
) -> None:
    with pytest.raises(InvalidDuration, match="run_after"):
        jobs.noop.using(run_after=timedelta(days=999_999_999)).enqueue()
    assert not JobRun.objects.exists()


@pytest.mark.django_db
@pytest.mark.parametrize(("given", "later"), [("5m", 300), (300, 300), (timedelta(hours=1), 3600)])
def test_run_after_takes_a_duration(clock: FakeClock, given: Any, later: int) -> None:
    run = jobs.noop.using(run_after=given).enqueue()
    run.refresh_from_db()
    assert run.wake_at == clock.now() + timedelta(seconds=later)


@pytest.mark.django_db
def test_purge_older_than_before_year_one_is_duration_invalid() -> None:
    with pytest.raises(InvalidDuration, match="99999999w"):
        runs.purge("99999999w")
    with pytest.raises(CommandError, match="99999999w"):
        call_command("jobs", "purge", "--older-than", "99999999w")


# -- 9. values no database can store ------------------------------------------------------


@pytest.mark.django_db
@pytest.mark.parametrize(
    "value", ["a\ud800", input_jobs.nested(5000), input_jobs.nested(MAX_DEPTH + 1)]
)
def test_unstorable_arguments_are_payload_invalid_and_write_nothing(value: Any) -> None:
    with pytest.raises(InvalidPayload, match="argument 'value'"):
        input_jobs.echo.enqueue(value=value)
    with pytest.raises(InvalidPayload, match="argument 0"):
        input_jobs.echo.enqueue(value)
    with pytest.raises(InvalidPayload, match="call 1: argument 0"):
        input_jobs.echo.enqueue_many([(1,), (value,)])
    assert not JobRun.objects.exists()


@pytest.mark.django_db
@pytest.mark.parametrize("value", [{"k": "\udfff"}, input_jobs.nested(5000)])
def test_unstorable_event_payloads_are_payload_invalid(value: Any) -> None:
    with pytest.raises(InvalidPayload, match="payload"):
        publish_event("order.paid", value, key="1")
    assert not Event.objects.exists()


@pytest.mark.django_db
@pytest.mark.parametrize("kind", ["surrogate", "key-surrogate", "deep"])
def test_unstorable_step_outputs_fail_the_run_without_a_retry(driver: Driver, kind: str) -> None:
    run = failed_once(driver, input_jobs.output.enqueue(kind))
    assert run.error_code == "X_STEP_OUTPUT_INVALID"
    assert "make" in run.error


@pytest.mark.django_db
@pytest.mark.parametrize("kind", ["surrogate", "deep"])
def test_an_unstorable_return_value_fails_the_run_without_a_retry(
    driver: Driver, kind: str
) -> None:
    run = failed_once(driver, input_jobs.returns.enqueue(kind))
    assert run.error_code == "X_STEP_OUTPUT_INVALID"
    assert "return value" in run.error


@pytest.mark.django_db
def test_the_deepest_storable_value_is_stored_on_this_database(driver: Driver) -> None:
    # MariaDB refuses JSON nested 32 levels deep; MAX_DEPTH keeps every column below it.
    value = input_jobs.nested(MAX_DEPTH)
    run = input_jobs.echo.enqueue(value)
    driver.drain()
    run.refresh_from_db()
    assert run.status == RunStatus.SUCCEEDED, run.error
    assert run.result == value and run.args == [value]
    assert StepRecord.objects.get(run=run, name="echo").output == value
    event = publish_event("deep", value)
    event.refresh_from_db()
    assert event.payload == value


# -- 10. names and options ---------------------------------------------------------------


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("name", "key"),
    [("order\x00paid", None), ("order.paid", "4\x002"), ("order\ud800", None), ("e", "\udc00")],
)
def test_unstorable_event_names_and_keys_are_name_invalid(name: str, key: str | None) -> None:
    with pytest.raises(InvalidName) as caught:
        publish_event(name, {"ok": True}, key=key)
    assert caught.value.code == "X_NAME_INVALID"
    assert not Event.objects.exists()


@pytest.mark.django_db
@pytest.mark.parametrize("where", ["step", "match", "event", "publish-key"])
def test_unstorable_names_in_a_job_fail_the_run_without_a_retry(driver: Driver, where: str) -> None:
    run = failed_once(driver, input_jobs.bad_name.enqueue(where))
    assert run.error_code == "X_NAME_INVALID"
    assert "\\x00" in run.error
    assert not StepRecord.objects.filter(run=run).exists()
    assert not Event.objects.exists()


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("event", "match"), [("e" * 201, None), ("", None), ("order.paid", "k" * 256)]
)
def test_a_wait_for_a_name_or_key_the_columns_cannot_hold_is_name_invalid(
    event: str, match: str | None
) -> None:
    from django_durable_jobs.engine.memory import MemoryEventLog, MemoryStepStore
    from django_durable_jobs.engine.sync_steps import Steps

    steps = Steps(run_id="r", job_name="j", store=MemoryStepStore(), events=MemoryEventLog())
    with pytest.raises(InvalidName):
        steps.wait_for_event("wait", event, match=match)


@pytest.mark.django_db
def test_an_unstorable_idempotency_key_is_name_invalid() -> None:
    with pytest.raises(InvalidName):
        jobs.noop.using(idempotency_key="k\x00").enqueue()
    assert not JobRun.objects.exists()


@pytest.mark.django_db
def test_using_accepts_the_extremes_of_the_priority_column() -> None:
    low = jobs.noop.using(priority=-(2**31)).enqueue()
    high = jobs.noop.using(priority=2**31 - 1, queue="q" * 100).enqueue()
    assert JobRun.objects.get(pk=low.pk).priority == -(2**31)
    assert JobRun.objects.get(pk=high.pk).priority == 2**31 - 1
