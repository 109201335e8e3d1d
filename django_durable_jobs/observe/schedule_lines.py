"""Schedules as the terminal shows them (``manage.py jobs schedules``): times as every
time in the terminal (``formatting.stamp``), in the schedule's own time zone (the
column beside them), ISO 8601 in ``--json``."""

from __future__ import annotations

from datetime import datetime, tzinfo
from typing import Any

from .. import conf
from ..engine.cron import zone
from ..exceptions import InvalidSchedule, UnknownJob
from ..models import Schedule
from ..verbs.schedules import describe
from .formatting import stamp

HEADERS = ("id", "job", "cron", "timezone", "enabled", "next runs (its zone)", "last run", "note")
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
    try:
        local: tzinfo | None = zone(row["timezone"])
    except InvalidSchedule:  # an edit the admin refused, made in the database
        local = None
    return (
        str(row["id"]),
        row["job_name"],
        row["cron"],
        row["timezone"],
        "yes" if row["enabled"] else "no",
        ", ".join(stamp(slot, local) for slot in upcoming) or "—",
        stamp(_parsed(row["last_run_at"]), local) or "—",
        row["note"],
    )


def _parsed(value: str | None) -> datetime | None:
    return None if value is None else datetime.fromisoformat(value)
