"""Confirmation pages: replaying from a step, the run page's retry / cancel / wake
buttons and the list actions say what will run again, and act only when the operator
confirms (as Django asks before a delete)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.db.models import QuerySet
from django.http import HttpRequest
from django.template.response import TemplateResponse

from ..models import FINISHED, JobRun, RunStatus, StepRecord, StepStatus
from ..verbs.bulk import preview

if TYPE_CHECKING:
    from django.contrib.admin import ModelAdmin

#: The hidden field a confirmation form adds; without it nothing happens.
CONFIRMED = "confirmed"
#: Runs named on a list action's confirmation page (the count covers the rest).
SHOWN = 100

#: What each list action does to a run, in the operator's words.
CONSEQUENCES = {
    "retry": "Each failed or cancelled run is queued now, its attempts start again from 1: "
    "completed steps replay from storage, the failed step runs again. Runs in another "
    "status are left as they are.",
    "cancel": "Each queued, sleeping, waiting or running run is cancelled (X_RUN_CANCELLED); "
    "a running run stops at its next step. Finished runs are left as they are.",
    "wake": "Each sleeping or waiting run, and each queued run scheduled for later, is "
    "runnable now: a sleep ends now, a wait looks for its event now.",
}


def confirmed(request: HttpRequest) -> bool:
    return request.method == "POST" and request.POST.get(CONFIRMED) == "yes"


def replay_page(
    model_admin: ModelAdmin[JobRun], request: HttpRequest, run: JobRun, step: str
) -> TemplateResponse:
    """The steps that replay from storage, and those that are forgotten and run again."""
    steps = StepRecord.objects.using(run._state.db).filter(run=run).order_by("id")
    names = list(steps.values_list("name", flat=True))
    cut = names.index(step) if step in names else len(names)
    context = {
        **model_admin.admin_site.each_context(request),
        "opts": model_admin.opts,
        "title": "Replay from a step?",
        "run": run,
        "step": step,
        "known": step in names,
        "kept": names[:cut],
        "again": names[cut:],
        "confirmed_field": CONFIRMED,
    }
    return TemplateResponse(
        request, "admin/django_durable_jobs/jobrun/confirm_replay.html", context
    )


def action_page(
    model_admin: ModelAdmin[JobRun],
    request: HttpRequest,
    queryset: QuerySet[JobRun],
    verb: str,
    label: str,
) -> TemplateResponse:
    """The selected runs and what the action will do to them; the form posts it again."""
    runs = list(queryset.order_by("-created_at").only("id", "job_name", "status")[:SHOWN])
    # The count the verb's rule applies to, from the rule itself (verbs/runs.py VERBS).
    shown = preview(verb, queryset.order_by(), shown=0)
    context: dict[str, Any] = {
        **model_admin.admin_site.each_context(request),
        "opts": model_admin.opts,
        "title": f"{label}?",
        "label": label,
        "action": request.POST.get("action", ""),
        "runs": runs,
        "count": shown.matched,
        "applicable": shown.applicable,
        "others": shown.matched - shown.applicable,
        "selected": request.POST.getlist("_selected_action"),
        "select_across": request.POST.get("select_across", "0"),
        "across": request.POST.get("select_across") == "1",
        "consequence": CONSEQUENCES[verb],
        "confirmed_field": CONFIRMED,
    }
    return TemplateResponse(
        request, "admin/django_durable_jobs/jobrun/confirm_action.html", context
    )


#: What each run-page button does to its run, in the operator's words.
VERB_CONSEQUENCES = {
    "retry": "The run is queued now and runs again from the top, its attempts starting "
    "again from 1.",
    "cancel": "The run is cancelled (X_RUN_CANCELLED); if it is running, it stops at its "
    "next step. A parent waiting for it is woken and fails.",
    "wake": "The run is runnable now: a sleep ends now, a wait looks for its event now "
    "(and waits again if none came), a run scheduled for later runs now.",
}


def verb_page(
    model_admin: ModelAdmin[JobRun], request: HttpRequest, run: JobRun, verb: str, label: str
) -> TemplateResponse:
    """One run, one verb: for a retry, which steps replay from storage and which run
    again (and the failed child runs started again); for a cancel, the child runs
    cancelled with it."""
    records = StepRecord.objects.using(run._state.db).filter(run=run).order_by("id")
    steps = list(records.values_list("name", "status"))
    children = JobRun.objects.using(run._state.db).filter(parent=run)
    context: dict[str, Any] = {
        **model_admin.admin_site.each_context(request),
        "opts": model_admin.opts,
        "title": f"{label}?",
        "label": label,
        "verb": verb,
        "run": run,
        "consequence": VERB_CONSEQUENCES[verb],
        "kept": [name for name, status in steps if status == StepStatus.COMPLETED],
        "again": [name for name, status in steps if status != StepStatus.COMPLETED],
        "children_again": children.filter(status__in=(RunStatus.FAILED, RunStatus.CANCELLED))
        .only("id", "job_name", "status")
        .order_by("created_at")[:SHOWN]
        if verb == "retry"
        else [],
        "children_cancelled": children.exclude(status__in=FINISHED)
        .only("id", "job_name", "status")
        .order_by("created_at")[:SHOWN]
        if verb == "cancel"
        else [],
        "confirmed_field": CONFIRMED,
    }
    return TemplateResponse(request, "admin/django_durable_jobs/jobrun/confirm_verb.html", context)
