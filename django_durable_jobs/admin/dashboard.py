"""The dashboard: runs started, succeeded and failed over the last hour and day, queue
depth, duration percentiles per job, the oldest runnable run's age, top errors and
live workers, as SVG drawn by templates from ``observe/charts.py`` geometry.

It is the change list of the ``Dashboard`` proxy model, so it sits in the app list and
the sidebar like the other pages; seeing it needs the permission to view runs.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from django.contrib import admin
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.utils import timezone

from ..engine import clock
from ..models import Dashboard
from ..observe import charts, rollups, stats, trace
from . import start

if TYPE_CHECKING:
    _ModelAdmin = admin.ModelAdmin[Dashboard]
else:
    _ModelAdmin = admin.ModelAdmin

#: Seconds between refreshes of the page's figures (paused while the tab is hidden).
REFRESH_SECONDS = 30


class DashboardAdmin(_ModelAdmin):
    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return request.user.has_perm("django_durable_jobs.view_jobrun")

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        if not self.has_view_permission(request):
            raise PermissionDenied
        context = {
            **self.admin_site.each_context(request),
            **figures(clock.current().now()),
            "opts": self.opts,
            "title": "Dashboard",
            "refresh_seconds": REFRESH_SECONDS,
            **start.links(request, self.admin_site.name),
        }
        return TemplateResponse(request, "admin/django_durable_jobs/dashboard.html", context)


def figures(now: datetime) -> dict[str, Any]:
    """Everything the template draws: the figures of ``stats.collect`` and the series."""
    folded = rollups.read(now)  # once, for the figures and both charts
    snapshot = stats.collect(now=now, folded=folded)
    minutes = stats.series(now, step=timedelta(minutes=1), buckets=60, folded=folded)
    hours = stats.series(now, step=timedelta(hours=1), buckets=24, folded=folded)
    slowest = max((d["p99"] for d in snapshot.durations.values()), default=0.0)
    age = snapshot.oldest_runnable_age_seconds
    paths = [path.split(".", 1) for path in snapshot.estimates]
    estimated_pairs = set()
    for kind, rest in paths:
        if kind == "queue_depth":
            queue, status = rest.rsplit(".", 1)  # a queue's name may hold dots
            estimated_pairs.add((queue, status))
    return {
        "stats": snapshot,
        # Counts above ``stats.EXACT_UP_TO`` are PostgreSQL's estimates (observe/counts.py).
        "estimated_statuses": [rest for kind, rest in paths if kind == "runs_by_status"],
        "exact_up_to": f"{stats.EXACT_UP_TO:,}",
        # The card counts the per-minute chart's 60 buckets, not the rolling hour of
        # ``stats.throughput``: a run 59m30s ago must not be in one and not the other.
        "hour_totals": {key: sum(counts) for key, counts in minutes.counts.items()},
        "hour_since": _labels(minutes.starts[:1])[0],
        "day_since": _labels(hours.starts[:1])[0],
        "last_hour": charts.line_chart(minutes.counts, _labels(minutes.starts), tick_every=10),
        "last_day": charts.line_chart(hours.counts, _labels(hours.starts), tick_every=4),
        "queues": charts.stacked_bars(snapshot.queue_depth, estimated_pairs),
        "durations": [
            {
                "job": job,
                "count": d["count"],
                "bars": [
                    (
                        f"p{p}",
                        trace.short_duration(timedelta(seconds=d[f"p{p}"])),
                        charts.scaled(d[f"p{p}"], slowest),
                    )
                    for p in stats.PERCENTILES
                ],
            }
            for job, d in snapshot.durations.items()
        ],
        "oldest_runnable": None if age is None else trace.short_duration(timedelta(seconds=age)),
        "errors": [
            (e.error, e.runs, charts.scaled(e.runs, snapshot.top_errors[0].runs))
            for e in snapshot.top_errors
        ],
    }


def _labels(starts: list[datetime]) -> list[str]:
    """Bucket starts as local clock times (``HH:MM``), the admin's time zone."""
    return [timezone.localtime(start).strftime("%H:%M") for start in starts]
