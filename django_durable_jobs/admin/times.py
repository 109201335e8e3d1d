"""A run's times in the admin: one format everywhere (``2026-01-01 09:30:00``, the
admin's time zone, to the second) with how long ago (or how far ahead) it is."""

from __future__ import annotations

from datetime import datetime

from django.contrib import admin
from django.utils.html import format_html
from django.utils.safestring import SafeString

from .. import clock, trace
from ..models import RUNNABLE, JobRun

EMPTY = "—"


def when(value: datetime | None, now: datetime) -> SafeString | str:
    """``2026-01-01 09:30:00 (3m ago)``; the exact instant in the tooltip."""
    if value is None:
        return EMPTY
    delta = value - now
    relative = (
        f"in {trace.short_duration(delta)}"
        if delta.total_seconds() > 0
        else f"{trace.short_duration(-delta)} ago"
    )
    return format_html(
        '<time datetime="{}" title="{}">{}</time> <span class="djdj-ago">({})</span>',
        value.isoformat(),
        value.isoformat(),
        trace.stamp(value),
        relative,
    )


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
        if run.status not in RUNNABLE:
            return EMPTY
        return when(run.wake_at, clock.current().now())

    @admin.display(description="lease expires")
    def lease_expires(self, run: JobRun) -> SafeString | str:
        return when(run.lease_expires_at, clock.current().now())
