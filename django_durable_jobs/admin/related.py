"""The runs about an object, on that object's admin page (a customer, an order).

A run is *about* an object when one of its job's arguments holds the object's primary
key, or when its idempotency key starts with a prefix made from it. Say which in the
``ModelAdmin``::

    from django_durable_jobs.admin import RelatedRunsMixin, RunsAbout

    @admin.register(Order)
    class OrderAdmin(RelatedRunsMixin, admin.ModelAdmin):
        related_runs = [
            RunsAbout("shop.receipt", argument="order_id"),
            RunsAbout("shop.sync_order", key_prefix="order-{pk}-"),
        ]

The page then shows a read-only "Runs" field: the newest runs about the object, each
linked to its run page, with its status and when it was created (one query).
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from django.contrib import admin
from django.db.models import Model, Q
from django.http import HttpRequest
from django.urls import reverse
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from .. import conf
from ..definitions import registry
from ..engine import clock
from ..exceptions import UnknownJob
from ..models import JobRun
from .display import badge
from .times import EMPTY, when

#: Runs listed on an object's page, newest first.
SHOWN = 20


@dataclass(frozen=True)
class RunsAbout:
    """Runs of ``job`` about an object: ``argument`` names the job's parameter that
    holds the object's primary key (passed by position or by name); ``key_prefix``
    (``str.format`` with ``pk``) matches the start of the run's idempotency key."""

    job: str
    argument: str | None = None
    key_prefix: str | None = None

    def __post_init__(self) -> None:
        if (self.argument is None) == (self.key_prefix is None):
            raise ValueError(f"RunsAbout({self.job!r}): give argument= or key_prefix=, one of them")

    def matching(self, pk: Any) -> Q:
        if self.key_prefix is not None:
            key = self.key_prefix.format(pk=pk)
            return Q(job_name=self.job, idempotency_key__startswith=key)
        assert self.argument is not None
        value = pk if isinstance(pk, int) else str(pk)
        found = Q(**{f"kwargs__{self.argument}": value})
        position = _position(self.job, self.argument)
        if position is not None:
            found |= Q(**{f"args__{position}": value})
        return Q(job_name=self.job) & found


def _position(job_name: str, argument: str) -> int | None:
    """Where ``argument`` sits in ``args`` (after ``ctx``); None if the job is not
    registered here or has no such positional parameter."""
    try:
        fn = registry.get_job(job_name).fn
    except UnknownJob:
        return None
    names = [
        p.name
        for p in inspect.signature(fn).parameters.values()
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
    ][1:]  # without ctx
    return names.index(argument) if argument in names else None


class RelatedRunsMixin:
    """Adds a read-only "Runs" field to a ``ModelAdmin``'s change page (see the module)."""

    related_runs: Sequence[RunsAbout] = ()

    class Media:
        css = {"all": ("django_durable_jobs/timeline.css",)}  # the status badges

    def get_readonly_fields(self, request: HttpRequest, obj: Model | None = None) -> Any:
        fields = list(super().get_readonly_fields(request, obj))  # type: ignore[misc]
        if obj is not None and self.related_runs and "durable_runs" not in fields:
            fields.append("durable_runs")
        return fields

    @admin.display(description="Runs")
    def durable_runs(self, obj: Model) -> SafeString | str:
        if obj.pk is None or not self.related_runs:
            return EMPTY
        about = Q()
        for rule in self.related_runs:
            about |= rule.matching(obj.pk)
        runs = list(
            JobRun.objects.using(conf.database())
            .filter(about)
            .order_by("-created_at")
            .only("id", "job_name", "status", "created_at")[: SHOWN + 1]
        )
        if not runs:
            return "No runs."
        now = clock.current().now()
        rows = format_html_join(
            "",
            '<li><a href="{}">{} {}</a> {} {}</li>',
            (
                (
                    reverse("admin:django_durable_jobs_jobrun_change", args=[run.pk]),
                    run.job_name,
                    str(run.pk)[:8],
                    badge(run.status),
                    when(run.created_at, now),
                )
                for run in runs[:SHOWN]
            ),
        )
        more = format_html("<li>… the newest {} shown</li>", SHOWN) if len(runs) > SHOWN else ""
        return format_html('<ul class="djdj-children">{}{}</ul>', rows, more)


__all__ = ["RelatedRunsMixin", "RunsAbout"]
