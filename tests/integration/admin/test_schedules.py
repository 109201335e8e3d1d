"""The schedules admin through the real admin client: add, validate, edit, pause,
the next five run times, and the runs list filtered by schedule."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest
from django.test import Client
from django.urls import reverse
from django.utils.html import escape

from django_durable_jobs import enqueue
from django_durable_jobs.engine.clock import FakeClock
from django_durable_jobs.models import JobRun, Schedule
from django_durable_jobs.verbs.schedules import start_due

pytestmark = pytest.mark.django_db
ADD = "admin:django_durable_jobs_schedule_add"
T0 = datetime(2026, 3, 27, 12, 0, tzinfo=UTC)  # two days before Paris springs forward


def form(**changes: str) -> dict[str, str]:
    data = {
        "job_name": "tests.slot",
        "cron": "30 2 * * *",
        "timezone": "Europe/Paris",
        "args": "[]",
        "kwargs": "{}",
        "enabled": "on",
    }
    data.update(changes)
    return data


def test_adding_a_schedule_shows_its_next_five_runs_in_its_time_zone(
    admin_client: Client, clock: FakeClock
) -> None:
    clock.set(T0)
    response = admin_client.post(reverse(ADD), form(), follow=True)
    assert response.status_code == 200
    schedule = Schedule.objects.get()
    assert schedule.next_run_at == datetime(2026, 3, 28, 1, 30, tzinfo=UTC)
    text = response.content.decode()
    # The night of the change: 02:30 does not exist in Paris; the run starts at 03:00.
    assert "March 28, 2026, 2:30 a.m. CET" in text
    assert "March 29, 2026, 3 a.m. CEST" in text
    assert "March 30, 2026, 2:30 a.m. CEST" in text
    change = reverse("admin:django_durable_jobs_schedule_change", args=[schedule.pk])
    page = admin_client.get(change)
    assert page.content.decode().count("<li>") >= 5
    assert "April 1, 2026, 2:30 a.m. CEST" in page.content.decode()


@pytest.mark.parametrize(
    ("field", "value", "error"),
    [
        ("cron", "30 2 * *", "has 4 field(s); write 5: minute hour day-of-month month"),
        ("cron", "30 26 * * *", "Bad hour"),
        ("timezone", "Europe/Pari", "unknown time zone &#x27;Europe/Pari&#x27;"),
        ("job_name", "tests.slott", "did you mean &#x27;tests.slot&#x27;"),
        # Arguments the job cannot take: every worker's tick would refuse them.
        (
            "args",
            "[1, 2]",
            "too many positional arguments; the job is slot(ctx, label=&#x27;&#x27;)",
        ),
        ("kwargs", '{"lable": "x"}', "unexpected keyword argument &#x27;lable&#x27;"),
        ("args", '{"label": "x"}', "a JSON list of positional arguments"),
        ("kwargs", "[1]", "a JSON object of keyword arguments"),
    ],
)
def test_bad_input_is_refused_with_a_clear_error(
    admin_client: Client, clock: FakeClock, field: str, value: str, error: str
) -> None:
    response = admin_client.post(reverse(ADD), form(**{field: value}))
    assert response.status_code == 200  # the form again, with the error
    assert error in response.content.decode()
    assert not Schedule.objects.exists()


@pytest.mark.parametrize(
    ("job_name", "kwargs"),
    [
        ("tests.per_tenant", {}),  # the throttle's key function needs `tenant`
        ("tests.by_region", {"account": {"no_region": 1}}),  # the key function's KeyError
        ("tests.one_per_key", {"key": "x" * 300}),  # a concurrency key too long to store
    ],
    ids=["key-argument-missing", "key-function-raises", "key-too-long"],
)
def test_arguments_the_jobs_limit_keys_cannot_be_made_of_are_refused_as_enqueue_refuses_them(
    admin_client: Client, clock: FakeClock, job_name: str, kwargs: dict[str, Any]
) -> None:
    """The arguments fit the job's signature, but a key of its limits cannot be made of
    them: each tick of each worker would disable the schedule instead of starting it."""
    with pytest.raises(Exception) as refused:  # noqa: PT011 - whatever enqueue raises
        enqueue(job_name, **kwargs)
    assert not JobRun.objects.exists()
    response = admin_client.post(reverse(ADD), form(job_name=job_name, kwargs=json.dumps(kwargs)))
    assert response.status_code == 200  # the form again, with the error
    said = f"cannot start: {type(refused.value).__name__}: {refused.value}"
    assert escape(said) in response.content.decode()
    assert not Schedule.objects.exists()


def test_pause_edit_and_the_runs_list_filtered_by_schedule(
    admin_client: Client, clock: FakeClock
) -> None:
    clock.set(T0)
    admin_client.post(reverse(ADD), form(cron="* * * * *", timezone="UTC"))
    admin_client.post(reverse(ADD), form(cron="*/2 * * * *", timezone="UTC"))
    every, other = Schedule.objects.order_by("id")
    clock.advance("2m")
    start_due(clock.now())
    assert JobRun.objects.count() == 2
    listing = admin_client.get(
        reverse("admin:django_durable_jobs_jobrun_changelist"),
        {"schedule__id__exact": every.pk},
    )
    assert "1 run" in listing.content.decode()  # only this schedule's run
    change = reverse("admin:django_durable_jobs_schedule_change", args=[every.pk])
    response = admin_client.post(change, form(cron="* * * * *", timezone="UTC", enabled=""))
    assert response.status_code == 302
    every.refresh_from_db()
    assert not every.enabled and every.next_run_at is None
    clock.advance("1h")
    assert [run.schedule_id for run in start_due(clock.now()).started] == [other.pk]
    admin_client.post(change, form(cron="0 9 * * *", timezone="Asia/Tokyo"))
    every.refresh_from_db()
    assert every.enabled and every.next_run_at == datetime(2026, 3, 28, 0, 0, tzinfo=UTC)


def test_the_pause_and_resume_actions_act_on_the_selected_schedules(
    admin_client: Client, clock: FakeClock
) -> None:
    """Pause stops the selected schedules; resume starts them again from now on: the
    slots missed while paused do not start, and a row it cannot resume says why."""
    clock.set(T0)
    for cron in ("* * * * *", "*/2 * * * *", "0 * * * *"):
        admin_client.post(reverse(ADD), form(cron=cron, timezone="UTC"))
    every, other, hourly = Schedule.objects.order_by("id")
    changelist = reverse("admin:django_durable_jobs_schedule_changelist")
    paused = admin_client.post(
        changelist, {"action": "pause", "_selected_action": [every.pk, other.pk]}, follow=True
    )
    assert "2 schedule(s) paused." in paused.content.decode()
    rows = {row.pk: row for row in Schedule.objects.all()}
    assert [(rows[s.pk].enabled, rows[s.pk].next_run_at) for s in (every, other)] == [
        (False, None),
        (False, None),
    ]
    assert rows[hourly.pk].enabled and rows[hourly.pk].next_run_at is not None  # not selected

    clock.advance("30m")
    assert [run.schedule_id for run in start_due(clock.now()).started] == []  # 12:30
    Schedule.objects.filter(pk=other.pk).update(job_name="tests.gone")  # cannot resume
    resumed = admin_client.post(
        changelist, {"action": "resume", "_selected_action": [every.pk, other.pk]}, follow=True
    )
    text = resumed.content.decode()
    assert "1 schedule(s) resumed; the slots missed while paused do not start." in text
    assert f"Schedule {other.pk}: no job is registered as &#x27;tests.gone&#x27;" in text
    every.refresh_from_db()
    other.refresh_from_db()
    assert every.enabled and every.next_run_at == datetime(2026, 3, 27, 12, 31, tzinfo=UTC)
    assert not other.enabled and other.next_run_at is None
    assert start_due(clock.now()).started == []  # the 29 slots missed while paused
    clock.advance("1m")
    assert [run.scheduled_at for run in start_due(clock.now()).started] == [
        datetime(2026, 3, 27, 12, 31, tzinfo=UTC)
    ]
