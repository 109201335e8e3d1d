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
from django_durable_jobs.schedules import reschedule, start_due

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
