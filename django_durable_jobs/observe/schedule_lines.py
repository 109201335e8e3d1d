"""Schedules as the terminal shows them (``manage.py jobs schedules``)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from .. import conf
from ..exceptions import InvalidSchedule, UnknownJob
from ..models import Schedule
from ..verbs.schedules import describe

HEADERS = ("id", "job", "cron", "timezone", "enabled", "next runs (local time)", "last run", "note")
#: How many upcoming run times each schedule shows.
UPCOMING = 3


def listing(now: datetime) -> list[dict[str, Any]]:
    """Every schedule as a JSON-ready dict, with its next run times after ``now``."""
    return [_row(schedule, now) for schedule in Schedule.objects.using(conf.database())]


def _row(schedule: Schedule, now: datetime) -> dict[str, Any]:
    upcoming: list[datetime] = []
    if schedule.enabled:
        try:
            upcoming = describe(schedule, now, UPCOMING)
        except (InvalidSchedule, UnknownJob):
            upcoming = []
    return {
        "id": schedule.pk,
        "job_name": schedule.job_name,
        "cron": schedule.cron,
        "timezone": schedule.timezone,
        "enabled": schedule.enabled,
        "declared_in_code": schedule.code_key is not None,
        "next_runs": [slot.isoformat() for slot in upcoming],
        "last_run_at": schedule.last_run_at.isoformat() if schedule.last_run_at else None,
        "note": schedule.note,
    }


def cells(row: dict[str, Any]) -> tuple[str, ...]:
    upcoming = [datetime.fromisoformat(slot) for slot in row["next_runs"]]
    return (
        str(row["id"]),
        row["job_name"],
        row["cron"],
        row["timezone"],
        "yes" if row["enabled"] else "no",
        ", ".join(slot.strftime("%Y-%m-%d %H:%M%z") for slot in upcoming) or "—",
        row["last_run_at"] or "—",
        row["note"],
    )
