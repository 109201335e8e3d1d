"""Operating one run from its page: the retry, cancel and wake buttons and replay from
a step, each behind a page that says what will happen (``confirm.py``). The verbs are
``verbs/runs.py``'s; this module checks permissions, calls them and logs each change
in the admin's LogEntry."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from django.contrib import admin, messages
from django.contrib.admin.utils import unquote
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseNotAllowed
from django.shortcuts import redirect
from django.urls import URLPattern, path, reverse

from ..exceptions import DurableJobsError
from ..models import JobRun
from ..verbs import runs
from . import confirm

# ModelAdmin is generic only in django-stubs; at run time it cannot be subscripted.
if TYPE_CHECKING:
    _ModelAdmin = admin.ModelAdmin[JobRun]
else:
    _ModelAdmin = admin.ModelAdmin


@dataclass(frozen=True)
class Action:
    """How the admin shows one of ``runs.VERBS``; which runs it applies to is the verb's."""

    verb: runs.Verb
    label: str
    #: For messages ("2 runs retried.") and the admin's history ("Retried the run").
    done: str
    logged: str
    call: Callable[[uuid.UUID], JobRun]

    @property
    def name(self) -> str:
        return self.verb.name

    def offered(self, run: JobRun) -> bool:
        """Whether the run page offers it for ``run`` (the verb itself has the last word)."""
        return self.verb.allows(run)


VERBS: dict[str, Action] = {
    action.name: action
    for action in (
        Action(runs.VERBS["retry"], "Retry", "retried", "Retried the run", runs.retry),
        Action(runs.VERBS["cancel"], "Cancel", "cancelled", "Cancelled the run", runs.cancel),
        Action(runs.VERBS["wake"], "Wake now", "woken", "Woke the run", runs.wake),
    )
}


class OperateRuns(_ModelAdmin):
    """The runs admin's buttons: a POST per verb, confirmed first, then the run page."""

    def has_operate_permission(self, request: HttpRequest, obj: JobRun | None = None) -> bool:
        """Retry, cancel, wake and replay: the model's change permission (``ModelAdmin``'s
        answer: the runs admin's own is False, nothing is edited in a form)."""
        return super().has_change_permission(request, obj)

    def operate_urls(self) -> list[URLPattern]:
        return [
            path(
                "<path:object_id>/operate/<str:verb>/",
                self.admin_site.admin_view(self.operate_view),
                name=self._url_name("operate"),
            )
        ]

    def run_verbs(self, request: HttpRequest, run: JobRun) -> list[dict[str, str]]:
        """The buttons the run page shows this user for ``run``."""
        if not self.has_operate_permission(request, run):
            return []
        return [
            {"label": verb.label, "url": self._verb_url(run, verb.name)}
            for verb in VERBS.values()
            if verb.offered(run)
        ]

    def _verb_url(self, run: JobRun, verb: str) -> str:
        return reverse(
            f"{self.admin_site.name}:{self._url_name('operate')}",
            kwargs={"object_id": str(run.pk), "verb": verb},
        )

    def _url_name(self, view: str) -> str:
        return f"{self.opts.app_label}_{self.opts.model_name}_{view}"

    def operate_view(self, request: HttpRequest, object_id: str, verb: str) -> HttpResponse:
        """POST only; the admin site's wrapper has checked staff and CSRF already."""
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        run = self.get_object(request, unquote(object_id))
        if run is None or (verb not in VERBS and verb != "replay"):
            raise Http404("no such run or verb")
        if not self.has_operate_permission(request, run):
            raise PermissionDenied
        if verb == "replay":
            step = request.POST.get("step", "")
            if not confirm.confirmed(request):  # say what runs again, act on "yes"
                return confirm.replay_page(self, request, run, step)
            self._apply(
                request,
                run,
                lambda pk: runs.replay_from(pk, step),
                f"Replayed from step {step!r}",
            )
        else:
            chosen = VERBS[verb]
            if not confirm.confirmed(request):  # say what happens to it, act on "yes"
                return confirm.verb_page(self, request, run, verb, chosen.label)
            self._apply(request, run, chosen.call, chosen.logged)
        return redirect(f"{self.admin_site.name}:{self._url_name('change')}", str(run.pk))

    def _apply(
        self,
        request: HttpRequest,
        run: JobRun,
        call: Callable[[uuid.UUID], JobRun],
        message: str,
        *,
        quiet: bool = False,
    ) -> bool:
        try:
            changed = call(run.pk)
        except DurableJobsError as exc:
            messages.error(request, str(exc))
            return False
        self.log_change(request, changed, message)
        if not quiet:
            messages.success(request, f"{message}: {changed}.")
        return True


__all__ = ["VERBS", "Action", "OperateRuns"]
