"""Starting things from the admin: enqueue a run of a registered job, publish an event,
run a schedule now. Each page calls the verb the Python API calls (``enqueue_job``,
``publish_event``, ``schedules.run_now``) and, when it refuses, shows the API's own
message on the form again; nothing here validates twice (the forms, ``start_forms.py``,
read text into values and leave the judging to the verb).

Who may do what is the models' permissions: enqueueing needs ``add_jobrun``,
publishing ``add_event``, running a schedule now ``change_schedule``
(docs/reference/admin.md).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, TypeVar, cast

from django import forms
from django.contrib import messages
from django.contrib.admin import helpers
from django.contrib.admin.utils import unquote
from django.contrib.auth import get_permission_codename
from django.core.exceptions import PermissionDenied
from django.db import DatabaseError, transaction
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseNotAllowed
from django.shortcuts import redirect
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse

from .. import conf, signals
from ..definitions.registry import all_jobs, get_job, jobs_on_event
from ..engine import clock
from ..engine.signatures import signature_of
from ..models import Event, JobRun, RunStatus, Schedule, StepRecord
from ..verbs import schedules
from ..verbs.enqueue import enqueue_job
from ..verbs.events import publish_event
from .start_forms import EnqueueForm, PublishForm, refusal

if TYPE_CHECKING:
    from django.contrib.admin import ModelAdmin
    from django.db.models import Model

_Form = TypeVar("_Form", bound=forms.Form)
_Done = TypeVar("_Done")


def has_model_permission(request: HttpRequest, model: type[Model], action: str) -> bool:
    """The user's ``action`` permission on ``model`` (``add``, ``change``), whatever
    the model's admin offers: the runs and events admins have no add form."""
    opts = model._meta
    return request.user.has_perm(f"{opts.app_label}.{get_permission_codename(action, opts)}")


def can_enqueue(request: HttpRequest) -> bool:
    return has_model_permission(request, JobRun, "add")


def can_publish(request: HttpRequest) -> bool:
    return has_model_permission(request, Event, "add")


def links(request: HttpRequest, site_name: str) -> dict[str, str | None]:
    """The start pages this user may open (None for the others), for the pages that
    link to them: the runs and events lists, the dashboard."""
    return {
        "enqueue_url": reverse(f"{site_name}:django_durable_jobs_jobrun_enqueue")
        if can_enqueue(request)
        else None,
        "publish_url": reverse(f"{site_name}:django_durable_jobs_event_publish")
        if can_publish(request)
        else None,
    }


# -- the forms: text in, Python values out; the verbs judge the values -------------------


# -- the pages --------------------------------------------------------------------------


def enqueue_view(model_admin: ModelAdmin[JobRun], request: HttpRequest) -> HttpResponse:
    """GET: the form (``?job=NAME`` chooses the job); POST: enqueue, then the run's page."""
    form = _form(request, EnqueueForm, can_enqueue(request))
    if form.is_bound and form.is_valid():
        data = form.cleaned_data

        def enqueue() -> tuple[JobRun, bool]:
            with transaction.atomic(using=conf.database()), _announced() as new:
                job = get_job(data["job"])
                run = enqueue_job(job, data["args"], data["kwargs"], form.options())
            return run, run.pk in new

        if (done := _attempt(form, enqueue)) is not None:
            run, new = done
            _say_enqueued(model_admin, request, run, new)
            return redirect(
                f"{model_admin.admin_site.name}:django_durable_jobs_jobrun_change", run.pk
            )
    return _page(
        model_admin,
        request,
        "admin/django_durable_jobs/jobrun/enqueue.html",
        form,
        title="Enqueue a run",
        submit_label="Enqueue",
        jobs=_signatures(),
    )


@contextmanager
def _announced() -> Iterator[set[Any]]:
    """The ids of the runs ``run_enqueued`` announces meanwhile: ``enqueue_job`` sends
    it for a new run only, not for the run an idempotency key or a debounce returns."""
    ids: set[Any] = set()

    def heard(sender: Any, run: JobRun, **kwargs: Any) -> None:
        ids.add(run.pk)

    signals.run_enqueued.connect(heard, weak=False)
    try:
        yield ids
    finally:
        signals.run_enqueued.disconnect(heard)


def _say_enqueued(
    model_admin: ModelAdmin[JobRun], request: HttpRequest, run: JobRun, new: bool
) -> None:
    if run.status == RunStatus.SKIPPED:
        messages.warning(
            request,
            f"Run {run.pk} of {run.job_name} was skipped: its rate limit has no room for it.",
        )
    elif not new:  # the idempotency key's run, or the debounced run
        messages.warning(
            request,
            f"No new run: run {run.pk} of {run.job_name} is the one for this idempotency "
            "key or debounce key (a debounced run takes the latest arguments).",
        )
        return
    else:
        messages.success(request, f"Enqueued run {run.pk} of {run.job_name}.")
    model_admin.log_addition(request, run, "Enqueued in the admin")


def publish_view(model_admin: ModelAdmin[Event], request: HttpRequest) -> HttpResponse:
    """GET: the form (``?name=...&key=...`` fill it); POST: publish, then the event's page."""
    form = _form(request, PublishForm, can_publish(request))
    if form.is_bound and form.is_valid():
        data = form.cleaned_data
        key = data["key"] or None

        def publish() -> tuple[Event, int]:
            # One transaction, as `manage.py jobs publish`: the waiting runs wake as it commits.
            with transaction.atomic(using=conf.database()):
                waiting = _waiting_for(data["name"], key)
                return publish_event(data["name"], data["payload"], key=key), waiting

        if (done := _attempt(form, publish)) is not None:
            event, waiting = done
            model_admin.log_addition(request, event, "Published in the admin")
            messages.success(request, _published(event, waiting))
            return redirect(
                f"{model_admin.admin_site.name}:django_durable_jobs_event_change", event.pk
            )
    return _page(
        model_admin,
        request,
        "admin/django_durable_jobs/event/publish.html",
        form,
        title="Publish an event",
        submit_label="Publish",
    )


def _waiting_for(name: str, key: str | None) -> int:
    """How many runs wait for this event now: those ``publish_event`` wakes (it does
    not return the count; a run that starts waiting meanwhile is woken, not counted)."""
    if not isinstance(name, str) or not name:
        return 0
    using = conf.database()
    steps = StepRecord.objects.using(using).waiting_runs(name, key)
    return JobRun.objects.using(using).filter(pk__in=steps, status=RunStatus.WAITING).count()


def _published(event: Event, waiting: int) -> str:
    keyed = f" with key {event.key!r}" if event.key is not None else ""
    started = len(jobs_on_event(event.name))
    parts = [f"{waiting} waiting run{'s' * (waiting != 1)} woken"]
    if started:
        parts.append(f"{started} run{'s' * (started != 1)} of its on_event jobs started")
    return f"Published {event.name}{keyed} as event #{event.pk}: {'; '.join(parts)}."


def run_now_view(
    model_admin: ModelAdmin[Schedule], request: HttpRequest, object_id: str
) -> HttpResponse:
    """POST only: one run of the schedule now (``schedules.run_now``), then its page."""
    if request.method != "POST":
        return HttpResponseNotAllowed(["POST"])
    schedule = model_admin.get_object(request, object_id)
    if schedule is None:
        raise Http404("no such schedule")
    if not model_admin.has_change_permission(request, schedule):
        raise PermissionDenied
    try:
        run = schedules.run_now(schedule, clock.current().now())
    except DatabaseError:
        raise
    except Exception as exc:  # the schedule's arguments refused, its job gone
        messages.error(request, f"No run started: {refusal(exc)}")
        site = model_admin.admin_site.name
        return redirect(f"{site}:django_durable_jobs_schedule_change", schedule.pk)
    model_admin.log_change(request, schedule, f"Ran now: run {run.pk}")
    messages.success(
        request,
        f"Started run {run.pk} of schedule {schedule.pk} ({run.job_name}) now; the "
        "schedule's next run is unchanged.",
    )
    return redirect(f"{model_admin.admin_site.name}:django_durable_jobs_jobrun_change", run.pk)


def _form(request: HttpRequest, form_class: type[_Form], allowed: bool) -> _Form:
    """The page's form, for a user ``allowed`` to open it: the POST's values, or blank
    but for the fields the URL fills (``?job=shop.sync``)."""
    if not allowed:
        raise PermissionDenied
    initial = {name: request.GET[name] for name in request.GET if name != "_changelist_filters"}
    return form_class(request.POST if request.method == "POST" else None, initial=initial)


def _attempt(form: forms.Form, call: Callable[[], _Done]) -> _Done | None:
    """``call()``, or None with the API's refusal of the form's values (a key
    function's exception too) shown on the form. The database's own trouble is not the
    form's: it is raised, a 500 as anywhere else."""
    try:
        return call()
    except DatabaseError:
        raise
    except Exception as exc:
        form.add_error(None, refusal(exc))
        return None


def _signatures() -> list[tuple[str, str]]:
    """Each registered job and the arguments it takes, for the page's reference list."""
    shown = []
    for name, job in sorted(all_jobs().items()):
        try:
            signature = str(signature_of(job.fn))
        except (TypeError, ValueError):
            signature = "(...)"
        shown.append((name, signature))
    return shown


def _page(
    model_admin: ModelAdmin[Any],
    request: HttpRequest,
    template: str,
    form: forms.Form,
    **context: Any,
) -> TemplateResponse:
    return TemplateResponse(
        request,
        template,
        {
            **model_admin.admin_site.each_context(request),
            "opts": model_admin.opts,
            "form": form,
            # As the admin's change form wraps its form: its fieldset template draws it.
            # (django-stubs says ModelForm; AdminForm only reads the form's fields.)
            "adminform": helpers.AdminForm(
                cast(Any, form),
                [(None, {"fields": list(form.fields)})],
                {},
                model_admin=model_admin,
            ),
            **context,
        },
    )


# -- the hooks: each admin adds its page's URL with one line in its get_urls() ---------


def enqueue_urls(model_admin: ModelAdmin[JobRun]) -> list[URLPattern]:
    def view(request: HttpRequest) -> HttpResponse:
        return enqueue_view(model_admin, request)

    wrapped = model_admin.admin_site.admin_view(view)
    return [path("enqueue/", wrapped, name="django_durable_jobs_jobrun_enqueue")]


def publish_urls(model_admin: ModelAdmin[Event]) -> list[URLPattern]:
    def view(request: HttpRequest) -> HttpResponse:
        return publish_view(model_admin, request)

    wrapped = model_admin.admin_site.admin_view(view)
    return [path("publish/", wrapped, name="django_durable_jobs_event_publish")]


def run_now_urls(model_admin: ModelAdmin[Schedule]) -> list[URLPattern]:
    def view(request: HttpRequest, object_id: str) -> HttpResponse:
        return run_now_view(model_admin, request, unquote(object_id))

    wrapped = model_admin.admin_site.admin_view(view)
    return [path("<path:object_id>/run-now/", wrapped, name="django_durable_jobs_schedule_run_now")]
