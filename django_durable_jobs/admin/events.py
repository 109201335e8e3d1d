"""The events admin: the event log, read-only, with the runs each event may have woken."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from uuid import UUID

from django.contrib import admin
from django.db.models import Q
from django.http import HttpRequest, HttpResponse
from django.urls import URLPattern, reverse
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from .. import conf
from ..models import Event, StepRecord, StepStatus
from . import start
from .databases import OnJobsDatabase
from .display import json_block

# ModelAdmin is generic only in django-stubs; at run time it cannot be subscripted.
if TYPE_CHECKING:
    _ModelAdmin = admin.ModelAdmin[Event]
else:
    _ModelAdmin = admin.ModelAdmin

#: Runs listed per event; more are counted.
SHOWN = 10
#: Candidate steps read for one page of events.
CANDIDATES = 2000


@dataclass(frozen=True)
class Woken:
    run_id: UUID
    job_name: str
    step: str


def steps_completed_by(events: Sequence[Event]) -> dict[int, list[Woken]]:
    """For each event, the completed waits it may have completed, in one query.

    A wait completes with the first matching event after its cursor, so a step is
    attributed to the earliest event of ``events`` that matches its name and key
    (or any key), committed after the step's cursor, was published before the step
    completed and carries the payload the step returned. An earlier match outside
    ``events`` would make that attribution wrong, hence "may have".
    """
    if not events:
        return {}
    keys = {event.key for event in events if event.key is not None}
    rows = (
        StepRecord.objects.using(conf.database())
        .filter(
            status=StepStatus.COMPLETED,
            event__in={event.name for event in events},
            completed_at__gte=min(event.published_at for event in events),
        )
        .filter(Q(correlation_key__isnull=True) | Q(correlation_key__in=keys))
    )
    positions = [event.position for event in events]
    if None not in positions:  # else one of them is after every cursor
        rows = rows.filter(event_cursor__lt=max(p for p in positions if p is not None))
    candidates = rows.values_list(
        "run_id",
        "run__job_name",
        "name",
        "event",
        "correlation_key",
        "event_cursor",
        "completed_at",
        "output",
    ).order_by("-completed_at")[:CANDIDATES]
    found: dict[int, list[Woken]] = {event.id: [] for event in events}
    # In commit order: positioned events by position, then those not positioned yet.
    oldest_first = sorted(
        events, key=lambda event: (event.position is None, event.position or 0, event.id)
    )
    for run_id, job_name, step, name, key, cursor, completed_at, output in candidates:
        for event in oldest_first:
            if (
                event.name == name
                and (key is None or key == event.key)
                and cursor is not None
                and (event.position is None or cursor < event.position)
                and completed_at is not None
                and event.published_at <= completed_at
                and output == event.payload
            ):
                found[event.id].append(Woken(run_id, job_name, step))
                break
    return found


class EventAdmin(OnJobsDatabase, _ModelAdmin):
    list_display = ("id", "name", "key", "payload_short", "published_at", "woke")
    list_display_links = ("id", "name")
    list_filter = ("name",)
    search_fields = ("name", "=key")
    date_hierarchy = "published_at"
    list_per_page = 50
    show_full_result_count = False
    fields = ("id", "name", "key", "published_at", "payload_json", "woke")
    readonly_fields = fields

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # publishing is its own page (start.py), not a form over the row

    def get_urls(self) -> list[URLPattern]:
        return [*start.publish_urls(self), *super().get_urls()]

    def has_change_permission(self, request: HttpRequest, obj: Event | None = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Event | None = None) -> bool:
        return False

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        extra_context = {**(extra_context or {}), **start.links(request, self.admin_site.name)}
        response = super().changelist_view(request, extra_context)
        changelist = getattr(response, "context_data", {}).get("cl")
        if changelist is not None:
            page = list(changelist.result_list)  # the page the template will show
            woken = steps_completed_by(page)
            for event in page:
                event._woken = woken[event.id]
        return response

    @admin.display(description="payload")
    def payload_short(self, event: Event) -> str:
        text = json.dumps(event.payload, ensure_ascii=False)
        return text if len(text) <= 80 else text[:79] + "…"

    @admin.display(description="payload")
    def payload_json(self, event: Event) -> SafeString:
        return json_block(event.payload)

    @admin.display(description="may have woken")
    def woke(self, event: Event) -> SafeString | str:
        woken = getattr(event, "_woken", None)
        if woken is None:  # the event's own page
            woken = steps_completed_by([event])[event.id]
        if not woken:
            return "—"
        links = format_html_join(
            ", ",
            '<a href="{}" title="{}">{} · {}</a>',
            (
                (
                    reverse(
                        f"{self.admin_site.name}:django_durable_jobs_jobrun_change", args=[w.run_id]
                    ),
                    str(w.run_id),
                    w.job_name,
                    w.step,
                )
                for w in woken[:SHOWN]
            ),
        )
        more = len(woken) - SHOWN
        return format_html("{} and {} more", links, more) if more > 0 else links
