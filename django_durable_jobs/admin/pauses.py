"""The Pauses page: pause a queue or a job (add), resume it (the "Resume" action, or
delete), see who paused what and why.

A pause is an operator's action: adding one needs the ``add_pause`` permission,
resuming the ``delete_pause`` one (``verbs/pauses.py`` does both; every worker honours
the change within one poll; deleting a pause resumes it too). A pause is not edited,
but for its reason.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import ValidationError
from django.db.models import QuerySet
from django.http import HttpRequest
from django.urls import reverse
from django.utils.html import format_html
from django.utils.safestring import SafeString

from .. import conf
from ..definitions.registry import get_job
from ..engine import clock
from ..exceptions import UnknownJob
from ..models import RUNNABLE, JobRun, Pause, PauseKind
from ..verbs import pauses
from .databases import OnJobsDatabase

if TYPE_CHECKING:
    _ModelAdmin = admin.ModelAdmin[Pause]
    _ModelForm = forms.ModelForm[Pause]
else:
    _ModelAdmin = admin.ModelAdmin
    _ModelForm = forms.ModelForm


class PauseForm(_ModelForm):
    class Meta:
        model = Pause
        fields = ("kind", "name", "reason")

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        if data.get("kind") == PauseKind.JOB and data.get("name"):
            try:
                get_job(data["name"])
            except UnknownJob as exc:
                raise ValidationError({"name": str(exc)}) from None
        return data


class PauseAdmin(OnJobsDatabase):
    """The pauses, on the jobs database; its list too (not READ_DATABASE): a pause just
    added or resumed shows at once."""

    form = PauseForm
    lists_may_lag = False
    list_display = ("kind", "name", "paused_at", "paused_by", "reason", "runs_link")
    list_filter = ("kind",)
    search_fields = ("name", "reason", "paused_by")
    actions = ("resume",)

    def get_readonly_fields(self, request: HttpRequest, obj: Pause | None = None) -> Any:
        if obj is None:
            return ()
        return ("kind", "name", "paused_at", "paused_by", "runs_link")

    def get_fields(self, request: HttpRequest, obj: Pause | None = None) -> Any:
        if obj is None:
            return ("kind", "name", "reason")
        return ("kind", "name", "reason", "paused_at", "paused_by", "runs_link")

    def save_model(self, request: HttpRequest, obj: Pause, form: Any, change: bool) -> None:
        if not change:
            obj.paused_by = request.user.get_username()[:150]
            obj.paused_at = clock.current().now()
        super().save_model(request, obj, form, change)
        if not change:
            note = ""
            if obj.kind == PauseKind.QUEUE and not pauses.known_queue(obj.name):
                note = " No registered job uses this queue and no run is in it yet."
            messages.info(
                request,
                f"Workers stop claiming the runs of {obj.kind} {obj.name} within one poll; "
                f"running runs finish.{note}",
            )

    def delete_model(self, request: HttpRequest, obj: Pause) -> None:
        pauses.resume(obj.kind, obj.name)
        messages.info(request, f"Resumed {obj.kind} {obj.name}.")

    @admin.action(description="Resume the selected queues and jobs", permissions=["delete"])
    def resume(self, request: HttpRequest, queryset: QuerySet[Pause]) -> None:
        resumed = [f"{p.kind} {p.name}" for p in queryset if pauses.resume(p.kind, p.name)]
        messages.success(
            request,
            f"Resumed {', '.join(resumed) or 'nothing'}: workers claim their runs again "
            "within one poll.",
        )

    @admin.display(description="runs")
    def runs_link(self, pause: Pause) -> SafeString | str:
        if pause.pk is None:
            return "—"
        field = "queue" if pause.kind == PauseKind.QUEUE else "job_name"
        runs = JobRun.objects.using(conf.database()).filter(**{field: pause.name})
        held = runs.filter(status__in=RUNNABLE).count()  # a pause is a few rows: one each
        url = reverse("admin:django_durable_jobs_jobrun_changelist")
        query = urlencode({f"{field}__exact": pause.name})
        return format_html('<a href="{}?{}">{} run(s) not started or parked</a>', url, query, held)
