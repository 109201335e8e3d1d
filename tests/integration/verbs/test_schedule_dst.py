"""Daylight saving in the schedule's time zone, on the fake clock: a worker ticks every
minute of real time across the night of the change, and every slot that exists in
local time starts exactly once (a local time that does not exist starts at the first
minute after the gap; a fixed local time that happens twice starts once).
"""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from django_durable_jobs.engine.clock import FakeClock
from django_durable_jobs.models import JobRun, Schedule
from django_durable_jobs.verbs.schedules import reschedule, start_due

NIGHTS = {
    ("Europe/Paris", "spring-forward"): date(2026, 3, 29),  # 02:00 CET -> 03:00 CEST
    ("Europe/Paris", "fall-back"): date(2026, 10, 25),  # 03:00 CEST -> 02:00 CET
    ("America/New_York", "spring-forward"): date(2026, 3, 8),  # 02:00 EST -> 03:00 EDT
    ("America/New_York", "fall-back"): date(2026, 11, 1),  # 02:00 EDT -> 01:00 EST
}

# zone, change, cron -> the local times started between 23:59 the evening before and
# four real hours later.
EXPECTED: dict[tuple[str, str, str], list[str]] = {
    ("Europe/Paris", "spring-forward", "30 2 * * *"): ["03:00+02:00"],
    ("Europe/Paris", "spring-forward", "30 1 * * *"): ["01:30+01:00"],
    ("Europe/Paris", "spring-forward", "0 * * * *"): [
        "00:00+01:00", "01:00+01:00", "03:00+02:00", "04:00+02:00",
    ],
    ("Europe/Paris", "fall-back", "30 2 * * *"): ["02:30+02:00"],
    ("Europe/Paris", "fall-back", "30 1 * * *"): ["01:30+02:00"],
    ("Europe/Paris", "fall-back", "0 * * * *"): [
        "00:00+02:00", "01:00+02:00", "02:00+02:00", "02:00+01:00",
    ],
    ("America/New_York", "spring-forward", "30 2 * * *"): ["03:00-04:00"],
    ("America/New_York", "spring-forward", "30 1 * * *"): ["01:30-05:00"],
    ("America/New_York", "spring-forward", "0 * * * *"): [
        "00:00-05:00", "01:00-05:00", "03:00-04:00", "04:00-04:00",
    ],
    ("America/New_York", "fall-back", "30 2 * * *"): ["02:30-05:00"],
    ("America/New_York", "fall-back", "30 1 * * *"): ["01:30-04:00"],
    ("America/New_York", "fall-back", "0 * * * *"): [
        "00:00-04:00", "01:00-04:00", "01:00-05:00", "02:00-05:00",
    ],
}  # fmt: skip


def night_slots(zone: str, change: str, cron: str, clock: FakeClock) -> list[str]:
    """Tick every real minute across the night; the local times of the runs started."""
    tz, day = ZoneInfo(zone), NIGHTS[(zone, change)]
    midnight = datetime(day.year, day.month, day.day, tzinfo=tz)
    clock.set(midnight.astimezone(UTC) - timedelta(minutes=1))  # UTC: real minutes
    schedule = Schedule(job_name="tests.slot", cron=cron, timezone=zone)
    reschedule(schedule, clock.now()).save()
    for _ in range(4 * 60):
        clock.advance("1m")
        start_due(clock.now())
    runs = JobRun.objects.filter(schedule=schedule).order_by("scheduled_at")
    return [run.scheduled_at.astimezone(tz).strftime("%H:%M%z") for run in runs if run.scheduled_at]


@pytest.mark.django_db
@pytest.mark.parametrize(("zone", "change", "cron"), list(EXPECTED))
def test_daylight_saving_neither_skips_nor_doubles_a_slot(
    zone: str, change: str, cron: str, clock: FakeClock
) -> None:
    expected = [text[:-3] + text[-2:] for text in EXPECTED[(zone, change, cron)]]
    assert night_slots(zone, change, cron, clock) == expected


# zone, cron, workers down after the tick at (local time, fold), back at (local, fold)
# -> the local times started from the tick the workers come back on, for 15 minutes.
# A fold of 1 is the second pass of the repeated hour.
CATCH_UP: dict[tuple[str, str, str, int, str, int], list[str]] = {
    ("Europe/Paris", "*/5 * * * *", "02:10", 0, "02:12", 1): [
        "02:10+01:00", "02:15+01:00", "02:20+01:00", "02:25+01:00",
    ],
    ("Europe/Paris", "0 * * * *", "01:50", 0, "02:30", 1): ["02:00+01:00"],
    ("America/New_York", "*/5 * * * *", "01:10", 0, "01:12", 1): [
        "01:10-05:00", "01:15-05:00", "01:20-05:00", "01:25-05:00",
    ],
    ("America/New_York", "0 * * * *", "00:50", 0, "01:30", 1): ["01:00-05:00"],
}  # fmt: skip


@pytest.mark.django_db
@pytest.mark.parametrize(("zone", "cron", "down", "down_fold", "back", "back_fold"), list(CATCH_UP))
def test_catch_up_in_the_repeated_hour_starts_only_the_latest_missed_slot(
    zone: str, cron: str, down: str, down_fold: int, back: str, back_fold: int, clock: FakeClock
) -> None:
    """A slot missed while no worker ran starts once when one comes back, the
    latest one only; in the second pass of a fall-back hour that is a slot of the second
    pass, not the same wall time an hour earlier (nor every slot since it)."""
    tz, day = ZoneInfo(zone), NIGHTS[(zone, "fall-back")]

    def at(hour_minute: str, fold: int) -> datetime:
        hour, minute = map(int, hour_minute.split(":"))
        return datetime(day.year, day.month, day.day, hour, minute, tzinfo=tz, fold=fold)

    clock.set(datetime(day.year, day.month, day.day, tzinfo=tz).astimezone(UTC))
    schedule = Schedule(job_name="tests.slot", cron=cron, timezone=zone)
    reschedule(schedule, clock.now()).save()
    while clock.now() < at(down, down_fold).astimezone(UTC):
        clock.advance("1m")
        start_due(clock.now())
    before = JobRun.objects.filter(schedule=schedule).count()
    clock.set(at(back, back_fold).astimezone(UTC))  # no worker ran in between
    first = start_due(clock.now()).started
    for _ in range(15):
        clock.advance("1m")
        start_due(clock.now())
    runs = JobRun.objects.filter(schedule=schedule).order_by("scheduled_at")[before:]
    expected = CATCH_UP[(zone, cron, down, down_fold, back, back_fold)]
    assert [wall_time(run, tz) for run in first] == expected[:1]
    assert [wall_time(run, tz) for run in runs] == expected


def wall_time(run: JobRun, tz: ZoneInfo) -> str:
    """``02:10+01:00``: the slot's local time and offset."""
    assert run.scheduled_at is not None
    return run.scheduled_at.astimezone(tz).isoformat(timespec="minutes")[11:]
