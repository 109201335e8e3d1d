"""``manage.py jobs``: show, list, retry, cancel, wake, replay, publish, purge, and
one clear line (never a traceback) for every mistake."""

from __future__ import annotations

import json
import uuid
from datetime import timedelta
from io import StringIO
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from django_durable_jobs.engine.clock import FakeClock
from django_durable_jobs.models import Event, JobRun, RunStatus
from tests.conftest import Driver
from tests.factories import JobRunFactory
from tests.testapp import input_jobs, jobs
from tests.testapp.admin_jobs import fragile, napper, waiter
from tests.testapp.flow_jobs import digest, per_customer

pytestmark = pytest.mark.django_db


def jobs_command(*args: str, **options: Any) -> str:
    out = StringIO()
    call_command("jobs", *args, stdout=out, **options)
    return out.getvalue()


def onboarded(driver: Driver, clock: FakeClock) -> JobRun:
    """A run that slept, waited for its event and succeeded."""
    run = jobs.onboarding.enqueue(user_id=42)
    driver.step()
    clock.advance("3d")
    driver.step()
    Event.objects.create(
        name="order.paid", key="42", payload={"order": 9}, published_at=clock.now()
    )
    clock.advance("30s")
    driver.step()
    run.refresh_from_db()
    assert run.status == RunStatus.SUCCEEDED
    return run


def test_show_prints_the_trace_as_a_table(driver: Driver, clock: FakeClock) -> None:
    run = onboarded(driver, clock)
    out = jobs_command("show", str(run.pk))
    lines = out.splitlines()
    assert lines[0].startswith(f"run {run.pk}  tests.onboarding  succeeded  attempt 1 / 2")
    assert "result {" in out
    header = next(i for i, line in enumerate(lines) if line.startswith("#  step"))
    assert lines[header].split() == [
        "#", "step", "status", "attempts", "started", "took", "replayed", "wake", "/", "event",
        "error",
    ]  # fmt: skip
    rows = lines[header + 1 :]
    assert [row.split()[1] for row in rows] == [
        "load-user",
        "send-welcome",
        "sleep:3d",
        "wait-order",
    ]
    assert ["replayed" in row for row in rows] == [True, True, True, False]
    assert "until 2026-01-04 00:00:00" in rows[2]
    assert "order.paid key=42" in rows[3]
    assert "\x1b[" not in out  # not a terminal: no colour


def test_show_in_colour_when_forced(driver: Driver, clock: FakeClock) -> None:
    run = onboarded(driver, clock)
    assert "\x1b[" in jobs_command("show", str(run.pk), force_color=True)


def test_show_json(driver: Driver, clock: FakeClock) -> None:
    run = onboarded(driver, clock)
    data = json.loads(jobs_command("show", str(run.pk), "--json"))
    assert data["id"] == str(run.pk) and data["max_attempts"] == 2
    assert [(s["name"], s["replayed"]) for s in data["steps"]] == [
        ("load-user", True),
        ("send-welcome", True),
        ("sleep:3d", True),  # the wait looked again after the sleep: a later execution
        ("wait-order", False),
    ]
    assert data["steps"][3]["output"] == {"order": 9}


def test_show_prints_the_flow_keys_a_run_holds(clock: FakeClock) -> None:
    run = per_customer.enqueue(customer_id=42)
    JobRun.objects.filter(pk=run.pk).update(throttle_key="", throttle_limit=5)
    lines = jobs_command("show", str(run.pk)).splitlines()
    assert "concurrency key 42  throttle key (every run of the job)" in lines
    data = json.loads(jobs_command("show", str(run.pk), "--json"))
    assert (data["concurrency_key"], data["throttle_key"]) == ("42", "")
    assert "rate_limit_key" not in data and "debounce_key" not in data  # only those it holds
    debounced = digest.enqueue(7, ["a"])
    assert "debounce key 7" in jobs_command("show", str(debounced.pk)).splitlines()
    assert json.loads(jobs_command("show", str(debounced.pk), "--json"))["debounce_key"] == "7"


def test_show_prints_no_keys_for_a_run_without_limits(driver: Driver, clock: FakeClock) -> None:
    run = onboarded(driver, clock)
    assert " key " not in jobs_command("show", str(run.pk)).split("\n\n")[0]  # the summary
    data = json.loads(jobs_command("show", str(run.pk), "--json"))
    assert not {"concurrency_key", "throttle_key", "rate_limit_key", "debounce_key"} & set(data)


def test_show_a_failed_step(driver: Driver) -> None:
    jobs.FAIL_ONCE.add("fragile-two")
    run = fragile.enqueue()
    driver.step()
    out = jobs_command("show", str(run.pk))
    assert "error RuntimeError: injected failure in fragile-two" in out
    assert "builtins." not in out  # the short name for builtins, as a traceback says
    failed = next(line for line in out.splitlines() if line.split()[1:3] == ["two", "failed"])
    assert failed.endswith("RuntimeError: injected failure in fragile-two")


def test_list_filters_and_limits(clock: FakeClock) -> None:
    for index in range(3):
        JobRunFactory.create(
            status=RunStatus.FAILED, created_at=clock.now() + timedelta(seconds=index)
        )
    queued = JobRunFactory.create(status=RunStatus.QUEUED, job_name="tests.ops.napper")
    out = jobs_command("list", "--status", "failed", "--limit", "2")
    assert len(out.splitlines()) == 3 and out.count("failed") == 2
    out = jobs_command("list", "--job", "tests.ops.napper")
    assert str(queued.pk) in out and "0 / 1" in out
    assert jobs_command("list", "--job", "nothing.here").startswith("no runs")


def test_retry_cancel_wake_and_replay(driver: Driver, clock: FakeClock) -> None:
    run = napper.enqueue()
    driver.step()
    assert "woken: now sleeping" in jobs_command("wake", str(run.pk))
    assert "cancelled: now cancelled" in jobs_command("cancel", str(run.pk))
    assert "retried: now queued" in jobs_command("retry", str(run.pk))
    driver.step()
    run.refresh_from_db()
    assert run.status == RunStatus.SUCCEEDED
    out = jobs_command("replay", str(run.pk), "after")
    assert "replaying from step 'after': now queued" in out


def test_publish_wakes_the_waiting_run(
    driver: Driver, clock: FakeClock, django_capture_on_commit_callbacks: Any
) -> None:
    run = waiter.enqueue("42")
    driver.step()
    clock.advance("1s")
    with django_capture_on_commit_callbacks(execute=True):
        out = jobs_command("publish", "order.paid", "--key", "42", "--payload", '{"order": 1}')
    assert out.startswith("published order.paid key=42 as event #")
    run.refresh_from_db()
    assert run.wake_at == clock.now()  # woken when the publish committed
    driver.step()
    run.refresh_from_db()
    assert run.status == RunStatus.SUCCEEDED and run.result == {"order": 1}


def test_purge(clock: FakeClock) -> None:
    JobRunFactory.create(status=RunStatus.SUCCEEDED, finished_at=clock.now() - timedelta(days=31))
    JobRunFactory.create(status=RunStatus.FAILED, finished_at=clock.now() - timedelta(days=31))
    assert jobs_command("purge", "--older-than", "30d", "--status", "failed") == (
        "deleted 1 run and their steps\n"
    )
    assert jobs_command("purge", "--older-than", "30d") == "deleted 1 run and their steps\n"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("show", "00000000-0000-0000-0000-000000000000"), "no run has the id"),
        (("show", "nope"), "'nope' is not a run id"),
        (("retry", str(uuid.UUID(int=1))), "no run has the id"),
        (("publish", "order.paid", "--payload", "{oops"), "--payload is not valid JSON"),
        (("publish", "order.paid", "--payload", "NaN"), "cannot be stored as JSON"),
        (("purge", "--older-than", "5 mins"), "invalid duration '5 mins'"),
        (("list", "--limit", "0"), "--limit must be at least 1"),
        (("list", "--status", "asleep"), "invalid choice: 'asleep'"),
        (("replay", str(uuid.UUID(int=1))), "replay takes RUN_ID STEP, or STEP with a filter"),
        ((), "ACTION"),
    ],
)
def test_mistakes_are_one_clear_line(args: tuple[str, ...], message: str) -> None:
    with pytest.raises(CommandError, match=message):
        jobs_command(*args)


def test_a_run_in_the_wrong_status(driver: Driver) -> None:
    run = fragile.enqueue()
    driver.step()
    with pytest.raises(CommandError, match="it is succeeded; only queued"):
        jobs_command("cancel", str(run.pk))


def test_list_shows_the_error_type_and_message_of_a_users_own_exception() -> None:
    JobRunFactory.create(
        status=RunStatus.FAILED, error_type="builtins.ValueError", error="card\ndeclined"
    )
    JobRunFactory.create(
        status=RunStatus.FAILED, error_code="X_JOB_TIMEOUT", error="run took over 1m: " + "x" * 80
    )
    out = jobs_command("list")
    assert "ValueError: card declined" in out
    assert "X_JOB_TIMEOUT: run took over 1m: xxx" in out
    assert "builtins." not in out
    (timed_out,) = [line for line in out.splitlines() if "X_JOB_TIMEOUT" in line]
    assert timed_out.rstrip().endswith("x…")


def test_list_and_show_name_an_error_type_the_same_way() -> None:
    declined = JobRunFactory.create(
        status=RunStatus.FAILED, error_type="shop.errors.CardDeclined", error="card declined"
    )
    expected = "shop.errors.CardDeclined: card declined"
    assert expected in jobs_command("list")
    assert f"error {expected}" in jobs_command("show", str(declined.pk)).splitlines()


def test_attempts_of_a_run_whose_job_is_unknown_here_show_only_the_attempt() -> None:
    run = JobRunFactory.create(job_name="tests.nowhere", status=RunStatus.FAILED, attempt=1)
    (row,) = [line for line in jobs_command("list").splitlines() if str(run.pk) in line]
    assert row.split()[1:4] == ["tests.nowhere", "failed", "1"] and "?" not in row
    summary = jobs_command("show", str(run.pk)).splitlines()[0]
    assert "  attempt 1  queue " in summary and "?" not in summary


def test_show_a_finished_run_without_steps_does_not_say_yet(driver: Driver) -> None:
    run = input_jobs.returns.enqueue("surrogate")  # fails on its return value, no step
    driver.step(run)
    out = jobs_command("show", str(run.pk))
    assert "yet" not in out
    assert out.splitlines()[-1] == "no steps: the run failed without recording a step"
    cancelled = JobRunFactory.create(status=RunStatus.CANCELLED, started_at=None)
    assert jobs_command("show", str(cancelled.pk)).splitlines()[-1] == (
        "no steps: the run was cancelled before it started"
    )
    queued = JobRunFactory.create(status=RunStatus.QUEUED)
    assert jobs_command("show", str(queued.pk)).splitlines()[-1] == "no steps recorded yet"


def test_list_of_a_job_nobody_registered_says_so() -> None:
    assert jobs_command("list", "--job", "billing.nope") == (
        "no runs; no job named billing.nope is registered\n"
    )
    assert jobs_command("list", "--job", "tests.ops.napper") == "no runs\n"  # registered
    JobRunFactory.create(job_name="billing.removed")  # an old run of a removed job
    assert "billing.removed" in jobs_command("list", "--job", "billing.removed")
