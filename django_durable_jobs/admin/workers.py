"""The workers admin: a read-only list of the ``runjobs`` processes, live and lost,
with the runs each holds. Rows are written by the workers themselves (``worker/presence.py``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.contrib import admin
from django.contrib.admin.views.main import ChangeList
from django.http import HttpRequest
from django.urls import reverse
from django.utils.html import format_html_join
from django.utils.safestring import SafeString, mark_safe

from .. import conf
from ..engine import clock
from ..models import Worker
from ..worker import presence
from .databases import OnJobsDatabase
from .display import badge, ident, job_label
from .times import when

RUN_PAGE = "django_durable_jobs_jobrun_change"

if TYPE_CHECKING:
    _ModelAdmin = admin.ModelAdmin[Worker]
else:
    _ModelAdmin = admin.ModelAdmin


class _WorkerList(ChangeList):
    """Fetches the runs in hand of the page's workers in one query, not one per row."""

    def get_results(self, request: HttpRequest) -> None:
        super().get_results(request)
        held = presence.runs_in_hand(w.worker_id for w in self.result_list)
        for worker in self.result_list:
            setattr(worker, "_in_hand", held.get(worker.worker_id, []))  # noqa: B010


class WorkerAdmin(OnJobsDatabase, _ModelAdmin):
    list_display = (
        "worker_id",
        "status_badge",
        "process",
        "version",
        "queue_list",
        "at_once",
        "started",
        "heard_from",
        "in_hand",
        "executed_count",
    )
    # "live" < "lost" < "stopped": the workers that matter first.
    ordering = ("status", "worker_id")
    search_fields = ("worker_id", "host")
    list_per_page = 100
    show_full_result_count = False

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Worker | None = None) -> bool:
        return False  # workers write their own rows

    def has_delete_permission(self, request: HttpRequest, obj: Worker | None = None) -> bool:
        return False  # stopped and lost workers are pruned after WORKER_RETENTION

    def get_changelist(self, request: HttpRequest, **kwargs: Any) -> type[ChangeList]:
        return _WorkerList

    @admin.display(description="status", ordering="status")
    def status_badge(self, worker: Worker) -> SafeString:
        lease = conf.required_duration("LEASE")
        return badge(presence.shown_status(worker, now=clock.current().now(), lease=lease))

    @admin.display(description="host, pid", ordering="host")
    def process(self, worker: Worker) -> str:
        return f"{worker.host}, {worker.pid}"

    @admin.display(description="runs at once", ordering="concurrency")
    def at_once(self, worker: Worker) -> int:
        return worker.concurrency

    @admin.display(description="queues")
    def queue_list(self, worker: Worker) -> str:
        return ", ".join(worker.queues) or "every queue"

    @admin.display(description="started", ordering="started_at")
    def started(self, worker: Worker) -> SafeString | str:
        return when(worker.started_at, clock.current().now())

    @admin.display(description="last heartbeat", ordering="last_heartbeat")
    def heard_from(self, worker: Worker) -> SafeString | str:
        return when(worker.last_heartbeat, clock.current().now())

    @admin.display(description="runs in hand")
    def in_hand(self, worker: Worker) -> SafeString | str:
        held: list[presence.InHand] = getattr(worker, "_in_hand", [])
        if not held:
            return "none"
        return format_html_join(
            mark_safe("<br>"),
            '<a href="{}">{} {}</a>',
            (
                (
                    reverse(
                        f"{self.admin_site.name}:django_durable_jobs_jobrun_change", args=[run.id]
                    ),
                    job_label(run.job_name),
                    ident(str(run.id)[:8]),
                )
                for run in held
            ),
        )

    @admin.display(description="executed", ordering="executed")
    def executed_count(self, worker: Worker) -> int:
        return worker.executed


__all__ = ["WorkerAdmin"]
