"""The slot a worker starts after downtime (``latest_slot``): the last slot at or before
now, also in the repeated hour of a fall-back night, where the same wall time happens
twice and an earlier slot can read as a later one."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from django_durable_jobs.engine.cron import latest_slot, next_slot

NIGHTS = [
    ("Europe/Paris", datetime(2026, 10, 25)),  # fall-back: 03:00 CEST -> 02:00 CET
    ("Europe/Paris", datetime(2026, 3, 29)),  # spring-forward: 02:00 CET -> 03:00 CEST
    ("America/New_York", datetime(2026, 11, 1)),  # fall-back: 02:00 EDT -> 01:00 EST
    ("America/New_York", datetime(2026, 3, 8)),  # spring-forward: 02:00 EST -> 03:00 EDT
]
EXPRESSIONS = ["*/5 * * * *", "0 * * * *", "15,45 * * * *", "30 1 * * *", "30 2 * * *"]


@pytest.mark.parametrize(("zone", "night"), NIGHTS)
@pytest.mark.parametrize("expr", EXPRESSIONS)
def test_latest_slot_is_the_last_forward_slot_at_or_before_now(
    zone: str, night: datetime, expr: str
) -> None:
    """Every 7 real minutes across the night: ``latest_slot`` is the last of the slots
    that ``next_slot`` walks through (the slots the worker starts when it runs)."""
    tz = ZoneInfo(zone)
    start = night.replace(tzinfo=tz).astimezone(UTC) - timedelta(hours=1)
    walked, at = [], start - timedelta(days=2)
    while at < start + timedelta(hours=7):
        at = next_slot(expr, tz, at)
        walked.append(at)
    now = start
    while now < start + timedelta(hours=6):
        expected = [slot for slot in walked if slot.timestamp() <= now.timestamp()][-1]
        found = latest_slot(expr, tz, now)
        assert found.isoformat() == expected.isoformat(), f"at {now.astimezone(tz)}"
        now += timedelta(minutes=7, seconds=3)


def local(zone: str, text: str, fold: int) -> datetime:
    """``2026-10-25 02:12`` in ``zone``; ``fold=1`` is the second pass of a repeated hour."""
    return datetime.fromisoformat(text).replace(tzinfo=ZoneInfo(zone), fold=fold)


@pytest.mark.parametrize(
    ("zone", "expr", "now", "latest"),
    [
        # 02:12 CET, the second pass: 02:10 CET, not 02:10 CEST an hour earlier.
        ("Europe/Paris", "*/5 * * * *", "2026-10-25 02:12", "2026-10-25T02:10:00+01:00"),
        ("Europe/Paris", "0 * * * *", "2026-10-25 02:30", "2026-10-25T02:00:00+01:00"),
        ("America/New_York", "*/5 * * * *", "2026-11-01 01:12", "2026-11-01T01:10:00-05:00"),
        ("America/New_York", "0 * * * *", "2026-11-01 01:30", "2026-11-01T01:00:00-05:00"),
        # A fixed local time in the repeated hour starts once, at its first pass.
        ("Europe/Paris", "30 2 * * *", "2026-10-25 02:40", "2026-10-25T02:30:00+02:00"),
    ],
)
def test_latest_slot_in_the_second_pass_of_a_repeated_hour(
    zone: str, expr: str, now: str, latest: str
) -> None:
    found = latest_slot(expr, ZoneInfo(zone), local(zone, now, fold=1))
    assert found.isoformat() == latest
    # the same instant given in UTC, as the database clock gives it
    in_utc = local(zone, now, fold=1).astimezone(UTC)
    assert latest_slot(expr, ZoneInfo(zone), in_utc).isoformat() == latest
