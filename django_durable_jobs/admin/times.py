"""Times in the admin: one format on every page of this app, the project's own
(Django's ``DATETIME_FORMAT`` for the active language, as the admin shows any date)
in the current time zone, with how long ago (or how far ahead) it is; the exact
instant in the tooltip. The terminal has its own single format (``observe.trace.stamp``)."""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta, tzinfo

from django.contrib import admin
from django.db.models import OuterRef, QuerySet, Subquery
from django.utils import formats, timezone
from django.utils.html import format_html
from django.utils.safestring import SafeString

from ..engine import clock
from ..models import RUNNABLE, JobRun, RunStatus, StepRecord, StepStatus
from ..observe import trace

EMPTY = "—"
#: Closer to now than this, a time is "just now".
JUST_NOW = timedelta(seconds=1)


def shown(value: datetime, zone: tzinfo | None = None) -> str:
    """``value`` as every page of this admin shows a time: the project's
    ``DATETIME_FORMAT`` ("Dec. 5, 2026, 11:03 p.m." in English by default), as Django's
    admin shows a model's date fields, in the current time zone; or in ``zone`` (a
    schedule's run times), then named ("March 29, 2026, 3 a.m. CEST"). Templates say
    the same with ``{{ value|date:"DATETIME_FORMAT" }}``."""
    text = formats.date_format(timezone.localtime(value, zone), "DATETIME_FORMAT")
    return text if zone is None else f"{text} {timezone.localtime(value, zone).tzname()}"


def when(value: datetime | None, now: datetime) -> SafeString | str:
    """``Jan. 1, 2026, 9:30 a.m. (3m ago)``; the exact instant in the tooltip."""
    if value is None:
        return EMPTY
    relative = relative_to_now(value - now)
    return format_html(
        '<time datetime="{}" title="{}">{}</time> <span class="djdj-ago">({})</span>',
        value.isoformat(),
        value.isoformat(),
        shown(value),
        relative,
    )


def relative_to_now(delta: timedelta) -> str:
    """``3m ago``, ``in 6d23h``; within a second either way (a heartbeat just written,
    a run due now) ``just now`` rather than ``0ms ago``."""
    if abs(delta) < JUST_NOW:
        return "just now"
    if delta > timedelta(0):
        return f"in {trace.short_duration(delta)}"
    return f"{trace.short_duration(-delta)} ago"


class RunTimes:
    """Display methods for ``JobRunAdmin``'s times (list columns and the run page)."""

    @admin.display(description="created", ordering="created_at")
    def created(self, run: JobRun) -> SafeString | str:
        return when(run.created_at, clock.current().now())

    @admin.display(description="first started", ordering="started_at")
    def started(self, run: JobRun) -> SafeString | str:
        return when(run.started_at, clock.current().now())

    @admin.display(description="finished", ordering="finished_at")
    def finished(self, run: JobRun) -> SafeString | str:
        return when(run.finished_at, clock.current().now())

    @admin.display(description="wakes", ordering="wake_at")
    def wakes(self, run: JobRun) -> SafeString | str:
        """A waiting run's deadline (it may resume any time before: its ``wake_at`` is
        only the next safety poll); a sleeping or queued run's wake time."""
        if run.status not in RUNNABLE:
            return EMPTY
        now = clock.current().now()
        if run.status == RunStatus.WAITING:
            deadline = getattr(run, "wait_deadline", None)
            if deadline is None and not hasattr(run, "wait_deadline"):
                deadline = waiting_deadline(run.pk)  # the run page: one run, one query
            if deadline is not None:
                return format_html("by {}", when(deadline, now))
        return when(run.wake_at, now)

    @admin.display(description="lease expires")
    def lease_expires(self, run: JobRun) -> SafeString | str:
        return when(run.lease_expires_at, clock.current().now())


def _waiting_steps() -> QuerySet[StepRecord]:
    return StepRecord.objects.filter(status=StepStatus.WAITING).exclude(deadline=None)


def with_wait_deadlines(runs: QuerySet[JobRun]) -> QuerySet[JobRun]:
    """``runs`` with ``wait_deadline``: the deadline of the step a waiting run waits in,
    read in the list's own query (a subquery per row on the steps' run index, not one
    query per row)."""
    waiting = _waiting_steps().filter(run=OuterRef("pk")).order_by("-id").values("deadline")
    return runs.annotate(wait_deadline=Subquery(waiting[:1]))


def waiting_deadline(run_id: uuid.UUID) -> datetime | None:
    return (
        _waiting_steps()
        .filter(run_id=run_id)
        .order_by("-id")
        .values_list("deadline", flat=True)
        .first()
    )
