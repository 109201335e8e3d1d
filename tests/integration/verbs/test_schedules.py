"""Schedules on the fake clock: slots, catch-up, edits, pause, sync from code."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from django_durable_jobs import Cron, job
from django_durable_jobs.definitions.registry import unregister
from django_durable_jobs.engine.clock import FakeClock
from django_durable_jobs.exceptions import InvalidSchedule, UnknownJob
from django_durable_jobs.models import JobRun, RunStatus, Schedule
from django_durable_jobs.verbs.schedules import Synced, Ticker, reschedule, start_due, sync
from tests.conftest import Driver
from tests.testapp import schedule_jobs

T0 = datetime(2026, 1, 5, 8, 59, 30, tzinfo=UTC)  # a Monday


def add(cron: str, now: datetime, timezone: str = "UTC", **fields: Any) -> Schedule:
    """A schedule as an operator adds it in the admin."""
    schedule = Schedule(job_name="tests.slot", cron=cron, timezone=timezone, **fields)
    reschedule(schedule, now).save()
    return schedule


def slots_started(schedule: Schedule) -> list[datetime]:
    runs = JobRun.objects.filter(schedule=schedule).order_by("scheduled_at")
    return [run.scheduled_at for run in runs if run.scheduled_at is not None]


@pytest.mark.django_db
def test_a_due_slot_starts_exactly_one_run_with_ctx_scheduled_at(
    clock: FakeClock, driver: Driver
) -> None:
    clock.set(T0)
    schedule = add("* * * * *", T0)
    assert schedule.next_run_at == datetime(2026, 1, 5, 9, 0, tzinfo=UTC)
    clock.set(T0 + timedelta(seconds=29))  # 08:59:59: not yet
    assert start_due(clock.now()).started == []
    clock.set(T0 + timedelta(seconds=31))  # 09:00:01
    started = start_due(clock.now()).started
    assert len(started) == 1
    assert start_due(clock.now()).started == []  # the same slot never starts twice
    schedule.refresh_from_db()
    assert schedule.last_run_at == datetime(2026, 1, 5, 9, 0, tzinfo=UTC)
    assert schedule.next_run_at == datetime(2026, 1, 5, 9, 1, tzinfo=UTC)
    driver.drain()
    run = JobRun.objects.get(pk=started[0].pk)
    assert run.status == RunStatus.SUCCEEDED
    assert run.result == "2026-01-05T09:00:00+00:00"


@pytest.mark.django_db
def test_ctx_scheduled_at_is_none_in_a_run_no_schedule_started(
    clock: FakeClock, driver: Driver
) -> None:
    clock.set(T0)
    run = schedule_jobs.slot.enqueue(label="by hand ")  # the job a schedule starts
    driver.drain()
    run.refresh_from_db()
    assert (run.status, run.schedule_id, run.scheduled_at) == (RunStatus.SUCCEEDED, None, None)
    assert run.result is None  # tests.slot returns None when ctx.scheduled_at is None


@pytest.mark.django_db
def test_a_stale_read_of_the_schedule_still_starts_one_run_per_slot(clock: FakeClock) -> None:
    """Where there are no row locks (SQLite), two workers may both read the schedule
    before either moves it on: the slot's idempotency key refuses the second run."""
    clock.set(T0 + timedelta(seconds=31))
    schedule = add("* * * * *", T0)
    first = start_due(clock.now()).started
    Schedule.objects.filter(pk=schedule.pk).update(next_run_at=schedule.next_run_at)  # stale
    second = start_due(clock.now()).started
    assert [run.pk for run in second] == [run.pk for run in first]
    assert JobRun.objects.filter(schedule=schedule).count() == 1


@pytest.mark.django_db
def test_after_downtime_only_the_latest_missed_slot_starts(clock: FakeClock) -> None:
    clock.set(T0)
    schedule = add("*/5 * * * *", T0)  # 09:00, 09:05, ...
    clock.set(datetime(2026, 1, 5, 11, 7, 12, tzinfo=UTC))  # no worker ran for two hours
    assert len(start_due(clock.now()).started) == 1
    assert start_due(clock.now()).started == []
    assert slots_started(schedule) == [datetime(2026, 1, 5, 11, 5, tzinfo=UTC)]
    schedule.refresh_from_db()
    assert schedule.next_run_at == datetime(2026, 1, 5, 11, 10, tzinfo=UTC)


@pytest.mark.django_db
def test_pause_and_edit(clock: FakeClock) -> None:
    clock.set(T0)
    schedule = add("0 9 * * *", T0, timezone="Europe/Paris")
    assert schedule.next_run_at == datetime(2026, 1, 6, 8, 0, tzinfo=UTC)  # 09:00 CET
    schedule.enabled = False
    reschedule(schedule, clock.now()).save()
    assert schedule.next_run_at is None
    clock.set(datetime(2026, 1, 8, tzinfo=UTC))
    assert start_due(clock.now()).started == []  # paused: nothing, also no catch-up later
    schedule.enabled, schedule.cron = True, "30  7 * * 1-5"
    reschedule(schedule, clock.now()).save()
    assert schedule.cron == "30 7 * * 1-5"
    assert schedule.next_run_at == datetime(2026, 1, 8, 6, 30, tzinfo=UTC)  # 07:30 CET
    clock.set(datetime(2026, 1, 8, 6, 30, 5, tzinfo=UTC))
    assert len(start_due(clock.now()).started) == 1
    schedule.cron = "0 24 * * *"
    with pytest.raises(InvalidSchedule, match="Bad hour"):
        reschedule(schedule, clock.now())
    with pytest.raises(UnknownJob, match=r"tests\.slott"):
        reschedule(Schedule(job_name="tests.slott", cron="* * * * *"), clock.now())


@pytest.mark.django_db
def test_arguments_of_a_schedule_reach_the_job(clock: FakeClock, driver: Driver) -> None:
    clock.set(T0)
    add("0 9 * * *", T0, kwargs={"label": "nightly "})
    clock.set(T0 + timedelta(minutes=1))
    (run,) = start_due(clock.now()).started
    driver.drain()
    run.refresh_from_db()
    assert run.result == "nightly 2026-01-05T09:00:00+00:00"


@pytest.mark.django_db
def test_a_schedule_whose_job_is_gone_is_disabled_and_says_why(clock: FakeClock) -> None:
    clock.set(T0)
    schedule = add("* * * * *", T0)
    Schedule.objects.filter(pk=schedule.pk).update(job_name="tests.renamed")
    clock.advance("1m")
    assert start_due(clock.now()).started == []
    schedule.refresh_from_db()
    assert not schedule.enabled and "no job is registered as 'tests.renamed'" in schedule.note


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("fields", "says"),
    [
        ({"args": [1, 2]}, "too many positional arguments"),
        ({"kwargs": {"lable": "x"}}, "unexpected keyword argument 'lable'"),
        ({"args": {"label": "x"}}, "args must be a JSON list"),
        (
            {"job_name": "tests.one_per_key", "kwargs": {"key": "x" * 300}},
            "InvalidName: job 'tests.one_per_key': the concurrency key",
        ),
        (
            {"job_name": "tests.by_region", "kwargs": {"account": {"no_region": 1}}},
            "KeyError: 'region'",
        ),
    ],
    ids=["args", "kwargs", "not-a-list", "key-too-long", "key-callable-raises"],
)
def test_a_schedule_whose_arguments_the_job_refuses_is_disabled_and_the_others_start(
    clock: FakeClock, fields: dict[str, Any], says: str
) -> None:
    """Edited by hand (or saved before the admin checked arguments): its InvalidPayload
    stopped every worker's tick, and each worker with it, on every restart; then a
    review found the same for arguments the job takes but its concurrency key cannot
    be made of (a key too long to store, a key callable's KeyError)."""
    clock.set(T0)
    bad, good = add("* * * * *", T0), add("* * * * *", T0)
    Schedule.objects.filter(pk=bad.pk).update(**fields)
    clock.advance("1m")
    (run,) = start_due(clock.now()).started
    assert run.schedule_id == good.pk
    bad.refresh_from_db()
    assert not bad.enabled and bad.note.startswith("cannot start: ") and says in bad.note
    assert JobRun.objects.count() == 1  # nothing of the bad schedule's start was written


@pytest.fixture
def declared() -> Iterator[None]:
    yield
    unregister("tests.weekly")


@pytest.mark.django_db
@pytest.mark.usefixtures("declared")
def test_sync_adds_code_schedules_disables_removed_ones_and_restores_them(
    clock: FakeClock,
) -> None:
    clock.set(T0)
    crons: list[str | Cron] = ["0 9 * * 1", Cron("30 2 * * *", timezone="Europe/Paris")]
    job(name="tests.weekly", cron=crons)(lambda ctx: None)
    assert sync(clock.now()).created == 2
    rows = {row.cron: row for row in Schedule.objects.filter(job_name="tests.weekly")}
    assert rows["0 9 * * 1"].timezone == "UTC"  # TIME_ZONE of the test settings
    assert rows["0 9 * * 1"].next_run_at == datetime(2026, 1, 5, 9, 0, tzinfo=UTC)
    assert rows["30 2 * * *"].timezone == "Europe/Paris"
    assert rows["30 2 * * *"].next_run_at == datetime(2026, 1, 6, 1, 30, tzinfo=UTC)
    assert sync(clock.now()).created == 0  # idempotent (every worker start, every migrate)

    job(name="tests.weekly", cron="0 9 * * 1")(lambda ctx: None)  # a deploy drops one
    assert sync(clock.now()).disabled == 1
    gone = Schedule.objects.get(job_name="tests.weekly", cron="30 2 * * *")
    assert not gone.enabled and gone.next_run_at is None
    assert gone.note.startswith("removed from code at 2026-01-05 08:59 UTC")

    job(name="tests.weekly", cron=crons)(lambda ctx: None)  # and brings it back
    assert sync(clock.now()).restored == 1
    back = Schedule.objects.get(pk=gone.pk)
    assert back.enabled and back.note == "" and back.next_run_at is not None


@pytest.mark.django_db
@pytest.mark.usefixtures("declared")
def test_sync_keeps_an_operators_pause_of_a_code_schedule(clock: FakeClock) -> None:
    clock.set(T0)
    job(name="tests.weekly", cron="0 9 * * 1")(lambda ctx: None)
    sync(clock.now())
    row = Schedule.objects.get(job_name="tests.weekly")
    row.enabled = False
    reschedule(row, clock.now()).save()
    sync(clock.now())
    row.refresh_from_db()
    assert not row.enabled


@pytest.mark.django_db
@pytest.mark.usefixtures("declared")
def test_migrate_adds_the_schedules_declared_in_code(clock: FakeClock) -> None:
    """``migrate`` syncs (the app's post_migrate handler): a deploy's new schedule has
    its row, and shows in the admin, before any worker starts."""
    from django.core.management import call_command

    clock.set(T0)
    job(name="tests.weekly", cron="0 9 * * 1")(lambda ctx: None)
    assert not Schedule.objects.filter(job_name="tests.weekly").exists()
    call_command("migrate", verbosity=0, interactive=False)
    row = Schedule.objects.get(job_name="tests.weekly")
    assert (row.cron, row.enabled) == ("0 9 * * 1", True)
    assert row.next_run_at == datetime(2026, 1, 5, 9, 0, tzinfo=UTC)


@pytest.fixture
def cased() -> Iterator[None]:
    yield
    for name in ("tests.Report", "tests.report", "tests." + "n" * 190):
        unregister(name)


@pytest.mark.django_db
@pytest.mark.usefixtures("cased")
def test_code_keys_compare_exactly_and_fit_any_database(clock: FakeClock) -> None:
    """Jobs named alike but for case each get their schedule (MariaDB's collation
    would make their keys one), and a long name and time zone still fit the key."""
    clock.set(T0)
    job(name="tests.Report", cron="0 9 * * 1")(lambda ctx: None)
    job(name="tests.report", cron="0 9 * * 1")(lambda ctx: None)
    long_name = "tests." + "n" * 190
    zone = "America/Argentina/ComodRivadavia"
    job(name=long_name, cron=Cron("0 9 * * 1", timezone=zone))(lambda ctx: None)
    assert sync(clock.now()).created == 3
    names = set(Schedule.objects.values_list("job_name", flat=True))
    assert names == {"tests.Report", "tests.report", long_name}
    assert all(len(row.code_key or "") <= 255 for row in Schedule.objects.all())
    assert sync(clock.now()) == Synced(0, 0, 0)  # the long key is recognised next time
    assert Schedule.objects.filter(enabled=True).count() == 3


@pytest.mark.django_db
def test_the_ticker_looks_again_only_when_a_slot_may_be_due(
    clock: FakeClock, django_assert_num_queries: Any
) -> None:
    clock.set(T0)
    add("0 9 * * *", T0)
    ticker = Ticker()
    with django_assert_num_queries(1):  # the earliest next slot: not due
        assert ticker.tick(clock.now()) == []
    with django_assert_num_queries(0):  # nothing is due before 09:00 nor time to refresh
        assert ticker.tick(clock.now() + timedelta(seconds=10)) == []
    with django_assert_num_queries(1):  # every 15s it looks again (admin edits)
        assert ticker.tick(clock.now() + timedelta(seconds=16)) == []
    assert len(ticker.tick(clock.now() + timedelta(seconds=30))) == 1


@pytest.mark.django_db
def test_jobs_schedules_lists_next_run_times_last_run_and_enabled(clock: FakeClock) -> None:
    import json
    from io import StringIO

    from django.core.management import call_command

    clock.set(T0)
    add("0 9 * * 1", T0, timezone="Europe/Paris", last_run_at=T0 - timedelta(minutes=1))
    add("*/15 * * * *", T0, enabled=False)
    out = StringIO()
    call_command("jobs", "schedules", stdout=out)
    lines = out.getvalue().splitlines()
    assert lines[0].split()[:5] == ["id", "job", "cron", "timezone", "enabled"]
    # Every time in one format, the terminal's (``jobs list``, ``workers``), in the
    # schedule's time zone, shown beside them; ISO 8601 in --json only.
    assert "2026-01-12 09:00:00, 2026-01-19 09:00:00, 2026-01-26 09:00:00" in lines[1]
    assert "2026-01-05 09:58:30" in lines[1]  # the last run: 08:58:30 UTC, in Paris
    assert "+0100" not in lines[1] and "+01:00" not in lines[1]
    assert " no " in lines[2] and "—" in lines[2]
    out = StringIO()
    call_command("jobs", "schedules", "--json", stdout=out)
    listed = json.loads(out.getvalue())
    assert listed[0]["next_runs"][0] == "2026-01-12T09:00:00+01:00"
    assert listed[1]["enabled"] is False and listed[1]["next_runs"] == []
