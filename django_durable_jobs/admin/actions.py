"""The runs list's actions over a selection: retry, cancel and wake the selected runs,
or with "select all" every run of the list's filter, after a page that says how many
runs they touch (``confirm.action_page``). Retry and cancel go through
``verbs/bulk.py`` in batches, one LogEntry per run acted on; wake run by run."""

from __future__ import annotations

import uuid
from typing import cast

from django.contrib import admin, messages
from django.contrib.admin.models import CHANGE, LogEntry
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse

from .. import conf
from ..models import JobRun
from ..verbs import bulk
from . import confirm
from .operate import VERBS, Action, OperateRuns


class RunActions(OperateRuns):
    """``JobRunAdmin``'s list actions: each run acted on as its page's button acts."""

    actions = ("retry_runs", "cancel_runs", "wake_runs")
    #: Runs per transaction of a list action over many runs (verbs/bulk.py).
    bulk_batch_size = bulk.BATCH_SIZE

    @admin.action(description="Retry the selected runs", permissions=["operate"])
    def retry_runs(self, request: HttpRequest, queryset: QuerySet[JobRun]) -> HttpResponse | None:
        return self._apply_all(request, queryset, VERBS["retry"], "Retry the selected runs")

    @admin.action(description="Cancel the selected runs", permissions=["operate"])
    def cancel_runs(self, request: HttpRequest, queryset: QuerySet[JobRun]) -> HttpResponse | None:
        return self._apply_all(request, queryset, VERBS["cancel"], "Cancel the selected runs")

    @admin.action(description="Wake the selected runs now", permissions=["operate"])
    def wake_runs(self, request: HttpRequest, queryset: QuerySet[JobRun]) -> HttpResponse | None:
        return self._apply_all(request, queryset, VERBS["wake"], "Wake the selected runs now")

    def _apply_all(
        self, request: HttpRequest, queryset: QuerySet[JobRun], verb: Action, label: str
    ) -> HttpResponse | None:
        # With "select all", ``queryset`` is every run of the list's current filter.
        if not confirm.confirmed(request):  # say what it applies to, act on "yes"
            return confirm.action_page(self, request, queryset, verb.name, label)
        if verb.name not in bulk.BULK_VERBS:
            done = 0
            for run in queryset.only("id", "job_name", "status"):
                done += self._apply(request, run, verb.call, verb.logged, quiet=True)
            if done:
                messages.success(request, f"{done} run{'s' * (done != 1)} {verb.done}.")
            return None
        outcome = bulk.apply(
            verb.name,
            queryset.order_by(),
            batch_size=self.bulk_batch_size,
            each_batch=lambda ids: self._log_batch(request, ids, verb.logged),
        )
        done, skipped = outcome.done, outcome.skipped
        if done:
            along = outcome.along and f" ({outcome.along} along with a parent run selected too)"
            messages.success(request, f"{done} run{'s' * (done != 1)} {verb.done}{along or ''}.")
        if skipped:
            changed = f" ({outcome.changed} changed meanwhile)" if outcome.changed else ""
            messages.warning(
                request,
                f"{skipped} run{'s' * (skipped != 1)} skipped{changed}: {verb.verb.refusal}.",
            )
        return None

    def _log_batch(self, request: HttpRequest, ids: list[uuid.UUID], message: str) -> None:
        """One LogEntry per run acted on, written once per batch."""
        LogEntry.objects.log_actions(
            user_id=cast(int, request.user.pk),
            queryset=JobRun.objects.using(conf.database())
            .filter(pk__in=ids)
            .only("id", "job_name", "status"),
            action_flag=CHANGE,
            change_message=message,
        )


__all__ = ["RunActions"]
