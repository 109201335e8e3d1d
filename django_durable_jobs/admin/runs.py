"""The runs admin: a read-only list and run page with the step timeline (and the
timeline alone, which a live run's page fetches to refresh itself). The operator's
verbs (retry, cancel, wake now, replay from a step) are buttons (``operate.py``) and
list actions (``actions.py``); the start pages are ``start.py``'s."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from django.contrib import admin, messages
from django.contrib.admin.utils import unquote
from django.core.exceptions import PermissionDenied
from django.db.models import Q, QuerySet
from django.db.models.functions import Lower, Substr
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseNotAllowed
from django.template.loader import render_to_string
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils.html import format_html
from django.utils.safestring import SafeString

from ..db.flow import holds
from ..db.run_ids import MIN_PREFIX
from ..engine import clock
from ..models import JobRun
from ..observe import progress, trace
from ..verbs import runs
from . import details, start
from .actions import RunActions
from .databases import OnJobsDatabase
from .display import (
    ERROR_TITLE,
    badge,
    error_summary,
    ident,
    job_label,
    json_block,
    text_block,
    tools_beside_title,
)
from .family import RunFamily
from .operate import VERBS, Action
from .times import EMPTY, RunTimes, with_wait_deadlines

# ModelAdmin is generic only in django-stubs; at run time it cannot be subscripted.
if TYPE_CHECKING:
    _ModelAdmin = admin.ModelAdmin[JobRun]
else:
    _ModelAdmin = admin.ModelAdmin

#: A full or partial run id (the list shows the first 8 characters).
_ID_PREFIX = re.compile(r"[0-9a-fA-F][0-9a-fA-F-]{5,35}")
#: Too short to search as a run id.
_ID_START = re.compile(r"[0-9a-fA-F][0-9a-fA-F-]{0,4}")


class JobRunAdmin(OnJobsDatabase, RunTimes, RunFamily, RunActions, _ModelAdmin):
    list_display = (
        "short_id",
        "status_cell",
        "job",
        "queue",
        "attempts",
        "created",
        "duration",
        "wakes",
    )
    empty_value_display = EMPTY
    list_display_links = ("short_id",)
    list_filter = ("status", "job_name", "job_version", "queue", "schedule")
    # get_search_results matches these (and a run id's start), whatever the case but
    # the idempotency key's.
    search_fields = ("job_name", "idempotency_key", "error_code", "error_type", "error")
    search_help_text = (
        "A run id (or its first characters), a job name, an idempotency key or words of "
        "an error (its code, exception type or message)."
    )
    date_hierarchy = "created_at"
    list_per_page = 50
    # "12 results (34,567,890 total)" costs a second COUNT over every run.
    show_full_result_count = False
    # What the run page shows, in the order of its details block (admin/details.py).
    readonly_fields = details.FIELDS

    # -- permissions: read-only; operating needs the change permission ---------------
    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: JobRun | None = None) -> bool:
        return False  # nothing is edited in a form: the page is a view

    def has_delete_permission(self, request: HttpRequest, obj: JobRun | None = None) -> bool:
        return False  # `manage.py jobs purge` deletes finished runs

    # -- the list --------------------------------------------------------------------
    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        request._durable_jobs_list = True  # type: ignore[attr-defined]
        extra_context = {**(extra_context or {}), **start.links(request, self.admin_site.name)}
        return super().changelist_view(request, extra_context)

    def get_queryset(self, request: HttpRequest) -> QuerySet[JobRun]:
        qs = super().get_queryset(request)
        if getattr(request, "_durable_jobs_list", False):
            # Arguments, results and tracebacks can be large and the list shows none; of
            # the error, only its start (display.error_summary, on hover).
            qs = with_wait_deadlines(qs.defer("args", "kwargs", "result", "error", "traceback"))
            qs = qs.annotate(error_start=Substr("error", 1, ERROR_TITLE + 1))
        return qs

    def get_search_results(
        self, request: HttpRequest, queryset: QuerySet[JobRun], search_term: str
    ) -> tuple[QuerySet[JobRun], bool]:
        term = search_term.strip()
        if not term:
            return queryset, False
        # Lower(), not icontains: MySQL's icontains is a LIKE that follows the column's
        # collation, and job names compare exactly (binary) there.
        folded = term.lower()
        match = Q(job_name_folded__contains=folded) | Q(idempotency_key=term)
        match |= Q(error_code_folded__contains=folded) | Q(error_type_folded__contains=folded)
        match |= Q(error_folded__contains=folded)
        if _ID_PREFIX.fullmatch(term):
            match |= Q(id__startswith=folded)
        found = queryset.annotate(
            job_name_folded=Lower("job_name"),
            error_code_folded=Lower("error_code"),
            error_type_folded=Lower("error_type"),
            error_folded=Lower("error"),
        ).filter(match)
        if not _ID_PREFIX.fullmatch(term) and _ID_START.fullmatch(term) and not found.exists():
            # Silence here reads as "no such run": say why it was not searched as an id.
            messages.info(
                request,
                f"No run matches {term!r}. To find a run by its id, type at least "
                f"{MIN_PREFIX} of its first characters.",
            )
        return found, False

    @admin.display(description="run", ordering="id")
    def short_id(self, run: JobRun) -> SafeString:
        return ident(str(run.id)[:8])

    @admin.display(description="status", ordering="status")
    def status_badge(self, run: JobRun) -> SafeString:
        return badge(run.status)

    @admin.display(description="job name", ordering="job_name")
    def job(self, run: JobRun) -> SafeString:
        return job_label(run.job_name)

    @admin.display(description="attempt")
    def attempts(self, run: JobRun) -> str:
        return trace.attempts_text(run.attempt, trace.max_attempts(run.job_name, run.job_version))

    @admin.display(description="took")
    def duration(self, run: JobRun) -> str:
        took = trace.run_duration(run, clock.current().now())
        return "—" if took is None else trace.short_duration(took)

    @admin.display(description="not starting")
    def held(self, run: JobRun) -> str:
        """Which limit holds a queued run back, and until when (docs/how-to/flow-control.md)."""
        return holds.held_reason(run, clock.current().now()) or "—"

    # -- the run page ----------------------------------------------------------------
    def get_fieldsets(self, request: HttpRequest, obj: JobRun | None = None) -> Any:
        # The page draws these as one aligned block (run_details.html), not as rows.
        return [(None, {"fields": self.readonly_fields})]

    @admin.display(description="args")
    def args_json(self, run: JobRun) -> SafeString:
        return json_block(run.args)

    @admin.display(description="kwargs")
    def kwargs_json(self, run: JobRun) -> SafeString:
        return json_block(run.kwargs)

    @admin.display(description="progress")
    def progress_shown(self, run: JobRun) -> SafeString:
        found = progress.bar(run.progress)
        # The JSON too when it says more than the bar ({"done", "total", "stage"}).
        extra = found is None or set(run.progress or ()) - {"done", "total"}
        context = {"bar": found, "detail": json_block(run.progress) if extra else ""}
        return render_to_string("django_durable_jobs/progress.html", context)

    @admin.display(description="status", ordering="status")
    def status_cell(self, run: JobRun) -> SafeString:
        """The list's status: the badge, and under it a small bar while the job's
        progress says how much of how much (its words on hover; other values: the
        JSON on hover), or the run's error, without widening the column."""
        # The list has no room for an error column at 800 px, nor at 1400 px with both
        # sidebars open: the error goes under the badge.
        error = error_summary(run, getattr(run, "error_start", None))
        return format_html("{}{}", self._badge_and_progress(run), error)

    def _badge_and_progress(self, run: JobRun) -> SafeString:
        found = progress.bar(run.progress)
        if found is not None:
            return format_html(
                '{}<progress class="djdj-progress--cell" value="{}" max="{}" title="{}">'
                "{}%</progress>",
                badge(run.status),
                found.done,
                found.total,
                found.text,
                found.percent,
            )
        if run.progress is not None:
            return format_html(
                '<span title="progress: {}">{}</span>',
                progress.progress_text(run.progress, 200),
                badge(run.status),
            )
        return badge(run.status)

    @admin.display(description="result")
    def result_json(self, run: JobRun) -> SafeString:
        return json_block(run.result)

    @admin.display(description="error")
    def error_text(self, run: JobRun) -> SafeString | str:
        return text_block(run.error)

    @admin.display(description="traceback")
    def traceback_text(self, run: JobRun) -> SafeString | str:
        if not run.traceback:
            return "—"
        return format_html(
            '<details class="djdj-traceback"><summary>traceback</summary>'
            '<pre class="djdj-text">{}</pre></details>',
            run.traceback,
        )

    def render_change_form(
        self,
        request: HttpRequest,
        context: dict[str, Any],
        add: bool = False,
        change: bool = False,
        form_url: str = "",
        obj: JobRun | None = None,
    ) -> HttpResponse:
        if obj is not None:
            context.update(
                self._timeline_context(request, obj),
                details=details.run_details(self, obj),
                tools_beside_title=tools_beside_title(),
                can_operate=self.has_operate_permission(request, obj),
                run_verbs=self.run_verbs(request, obj),
            )
        return super().render_change_form(request, context, add, change, form_url, obj)

    def _timeline_context(self, request: HttpRequest, run: JobRun) -> dict[str, Any]:
        """What timeline.html needs, on the run page and in its fragment alike."""
        can_replay = self.has_operate_permission(request, run) and runs.VERBS["replay"].allows(run)
        return {
            "trace": trace.load(run),
            "replay_url": self._verb_url(run, "replay") if can_replay else None,
            "timeline_url": reverse(
                f"{self.admin_site.name}:{self._url_name('timeline')}", args=[str(run.pk)]
            ),
        }

    def timeline_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        """The run page's timeline alone (timeline.html, no page around it): what a
        live run's page fetches every few seconds (refresh.js) instead of the whole
        page with its details block. The same permission as the page: view or change."""
        if request.method != "GET":
            return HttpResponseNotAllowed(["GET"])
        run = self.get_object(request, unquote(object_id))
        if run is None:
            raise Http404("no such run")
        if not self.has_view_or_change_permission(request, run):
            raise PermissionDenied
        context = self._timeline_context(request, run)
        return TemplateResponse(request, "django_durable_jobs/timeline.html", context)

    def get_urls(self) -> list[URLPattern]:
        return [
            *start.enqueue_urls(self),  # before "<path:object_id>/": "enqueue/" is no run
            path(
                "<path:object_id>/timeline/",
                self.admin_site.admin_view(self.timeline_view),
                name=self._url_name("timeline"),
            ),
            *self.operate_urls(),
            *super().get_urls(),
        ]


__all__ = ["VERBS", "Action", "JobRunAdmin"]  # VERBS and Action: operate.py's
