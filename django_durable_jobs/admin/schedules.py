"""The schedules admin: add, pause and edit schedules without a deploy.

Saving validates the cron expression, the time zone and the job name (a clear error
on the field) and sets the next slot; the page then shows the next five run times in
the schedule's time zone. Schedules declared in code can be paused and edited too;
a deploy never overwrites an operator's edit (see ``schedules.sync``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import ValidationError
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.urls import URLPattern, reverse
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from ..definitions.registry import get_job
from ..engine import clock
from ..engine.cron import check_expr, zone
from ..exceptions import InvalidSchedule, UnknownJob
from ..models import Schedule
from ..verbs import schedules
from . import start
from .databases import OnJobsDatabase
from .times import shown

if TYPE_CHECKING:
    _ModelAdmin = admin.ModelAdmin[Schedule]
    _ModelForm = forms.ModelForm[Schedule]
else:
    _ModelAdmin = admin.ModelAdmin
    _ModelForm = forms.ModelForm


class ScheduleForm(_ModelForm):
    class Meta:
        model = Schedule
        fields = ("job_name", "cron", "timezone", "args", "kwargs", "enabled")

    def clean_cron(self) -> str:
        return str(_valid(check_expr, self.cleaned_data.get("cron")))

    def clean_timezone(self) -> str:
        name = self.cleaned_data.get("timezone")
        _valid(zone, name)
        return str(name)

    def clean_job_name(self) -> str:
        name = self.cleaned_data.get("job_name")
        _valid(get_job, name)
        return str(name)

    def clean(self) -> dict[str, Any]:
        """The arguments, checked as ``enqueue`` checks them (the job's signature and
        the keys of its limits): a schedule whose runs cannot start is refused here,
        saying what the schedule's note would, not disabled by a worker's tick."""
        data = super().clean() or {}
        name, args, kwargs = data.get("job_name"), data.get("args"), data.get("kwargs")
        if name is None or self.has_error("args") or self.has_error("kwargs"):
            return data  # the field's own error is shown
        args = [] if args is None else args
        kwargs = {} if kwargs is None else kwargs
        if not isinstance(args, list):
            self.add_error("args", f"a JSON list of positional arguments, got {args!r}")
        elif not isinstance(kwargs, dict):
            self.add_error("kwargs", f"a JSON object of keyword arguments, got {kwargs!r}")
        else:
            try:
                schedules.check_arguments_of(name, args, kwargs)
            except Exception as exc:  # what enqueue raises: a key function's own error too
                raise ValidationError(schedules.refusal(exc)) from None
            data["args"], data["kwargs"] = args, kwargs
        return data


def _valid(check: Any, value: Any) -> Any:
    try:
        return check(value)
    except (InvalidSchedule, UnknownJob) as exc:
        raise ValidationError(str(exc)) from None


class ScheduleAdmin(OnJobsDatabase, _ModelAdmin):
    form = ScheduleForm
    list_display = ("job_name", "cron", "timezone", "enabled", "next_run", "last_run_at", "origin")
    list_filter = ("enabled", "job_name")
    search_fields = ("job_name", "cron")
    actions = ("pause", "resume")
    readonly_fields = ("next_runs", "next_run_at", "last_run_at", "origin", "note", "runs_link")
    fieldsets = (
        (None, {"fields": ("job_name", "cron", "timezone", "enabled")}),
        ("Arguments", {"fields": ("args", "kwargs")}),
        (
            "Runs",
            {"fields": ("next_runs", "next_run_at", "last_run_at", "runs_link", "origin", "note")},
        ),
    )

    def get_urls(self) -> list[URLPattern]:
        return [*start.run_now_urls(self), *super().get_urls()]

    def change_view(
        self,
        request: HttpRequest,
        object_id: str,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        # The "Run now" button (start.run_now_view), for those who may change the schedule.
        if self.has_change_permission(request):
            url = reverse(
                f"{self.admin_site.name}:django_durable_jobs_schedule_run_now", args=[object_id]
            )
            extra_context = {**(extra_context or {}), "run_now_url": url}
        return super().change_view(request, object_id, form_url, extra_context)

    def save_model(self, request: HttpRequest, obj: Schedule, form: Any, change: bool) -> None:
        schedules.reschedule(obj, clock.current().now())
        super().save_model(request, obj, form, change)
        upcoming = ", ".join(shown(slot, slot.tzinfo) for slot in self._upcoming(obj))
        if upcoming:
            messages.info(request, f"Next runs of {obj.job_name}: {upcoming}.")
        else:
            messages.info(request, f"{obj.job_name} is paused: no run starts until it is enabled.")

    @admin.action(description="Pause the selected schedules", permissions=["change"])
    def pause(self, request: HttpRequest, queryset: QuerySet[Schedule]) -> None:
        changed = queryset.update(enabled=False, next_run_at=None)
        messages.success(request, f"{changed} schedule(s) paused.")

    @admin.action(description="Resume the selected schedules (from now on)", permissions=["change"])
    def resume(self, request: HttpRequest, queryset: QuerySet[Schedule]) -> None:
        now, resumed = clock.current().now(), 0
        for schedule in queryset.filter(enabled=False):
            schedule.enabled = True
            try:
                schedules.reschedule(schedule, now).save()
            except (InvalidSchedule, UnknownJob) as exc:
                messages.error(request, f"schedule {schedule.pk}: {exc}")
            else:
                resumed += 1
        messages.success(
            request, f"{resumed} schedule(s) resumed; the slots missed while paused do not start."
        )

    @staticmethod
    def _upcoming(schedule: Schedule) -> list[Any]:
        if not schedule.enabled or schedule.pk is None:
            return []
        try:
            return schedules.describe(schedule, clock.current().now())
        except (InvalidSchedule, UnknownJob):
            return []

    @admin.display(description="next run", ordering="next_run_at")
    def next_run(self, schedule: Schedule) -> str:
        upcoming = self._upcoming(schedule)[:1]
        return shown(upcoming[0], upcoming[0].tzinfo) if upcoming else "— (paused)"

    @admin.display(description="next 5 runs (in the schedule's time zone)")
    def next_runs(self, schedule: Schedule) -> SafeString | str:
        upcoming = self._upcoming(schedule)
        if not upcoming:
            return "— (paused or not saved yet)"
        return format_html(
            "<ol>{}</ol>",
            format_html_join("", "<li>{}</li>", ((shown(s, s.tzinfo),) for s in upcoming)),
        )

    @admin.display(description="declared")
    def origin(self, schedule: Schedule) -> str:
        return "in code (@job cron=)" if schedule.code_key else "in the admin"

    @admin.display(description="runs")
    def runs_link(self, schedule: Schedule) -> SafeString | str:
        if schedule.pk is None:
            return "—"
        url = reverse("admin:django_durable_jobs_jobrun_changelist")
        return format_html(
            '<a href="{}?schedule__id__exact={}">{} run(s)</a>',
            url,
            schedule.pk,
            schedule.runs.count(),
        )
