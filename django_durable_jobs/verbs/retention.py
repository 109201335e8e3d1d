"""``DURABLE_JOBS["RETENTION"]``: purge old finished runs through a schedule.

With ``{"succeeded": "7d", "failed": "30d"}`` the app declares the job
``django_durable_jobs.retention`` with an hourly schedule; any worker starts it like
every other schedule (one run per hour, whatever the number of workers), and it
deletes the runs of each status that finished longer ago than its age. Off (None) by
default. Removing the setting disables the schedule at the next sync.
"""

from __future__ import annotations

from typing import Any

from .. import conf
from ..declare import job
from ..engine import clock
from ..engine.cron import Cron
from ..engine.durations import parse_duration
from . import runs

JOB_NAME = "django_durable_jobs.retention"
#: Hourly, off the full hour when many other schedules fire.
CRON = Cron("17 * * * *", timezone="UTC")


def policy() -> dict[str, str]:
    """The configured ``{status: age}`` (empty when retention is off)."""
    value = conf.get("RETENTION")
    return dict(value) if value else {}


def purge_old_runs(ctx: Any) -> dict[str, int]:
    """Delete finished runs older than their status's age; how many, per status."""
    deleted: dict[str, int] = {}
    for status, age in sorted(policy().items()):
        parse_duration(age)  # a bad value fails here, before anything is deleted
        deleted[status] = ctx.step.run(f"purge-{status}", _purge, status, str(age))
    return deleted


def _purge(status: str, age: str) -> int:
    return runs.purge(age, [status], now=clock.current().now())


def install() -> None:
    """Declare the retention job and its schedule when ``RETENTION`` is set."""
    if policy():
        job(name=JOB_NAME, cron=CRON, retries=1)(purge_old_runs)
