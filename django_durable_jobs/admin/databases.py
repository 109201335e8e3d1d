"""Which database each admin page reads: Django's recipe for an admin over another
database ("Exposing multiple databases in Django's admin interface"), with lists read
from ``READ_DATABASE`` when one is set.

A list shown by a GET (runs, events, workers, schedules) tolerates a replica's lag:
it is a view of many runs, refreshed by reloading. Everything else reads and writes
the jobs database (``DATABASE``): a run page, whose buttons act on the state it shows;
an action posted from a list, whose runs are then changed; a schedule's form.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse

from .. import conf

if TYPE_CHECKING:
    _ModelAdmin = admin.ModelAdmin[Any]
else:
    _ModelAdmin = admin.ModelAdmin


def reads_lagging(request: HttpRequest) -> bool:
    """Whether this request is a list page's GET, which may read a replica."""
    return bool(getattr(request, "_durable_jobs_lag_ok", False))


class OnJobsDatabase(_ModelAdmin):
    """A ``ModelAdmin`` whose queries go to the jobs database, lists to READ_DATABASE
    (unless ``lists_may_lag`` is False: a list an operator acts on and reloads at once)."""

    lists_may_lag = True

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        # A POST here is an action on the selected rows: it reads them from the jobs
        # database, where it then writes.
        lagging = self.lists_may_lag and request.method in ("GET", "HEAD")
        request._durable_jobs_lag_ok = lagging  # type: ignore[attr-defined]
        return super().changelist_view(request, extra_context)

    def get_queryset(self, request: HttpRequest) -> QuerySet[Any]:
        alias = conf.read_database() if reads_lagging(request) else conf.database()
        return super().get_queryset(request).using(alias)

    def save_model(self, request: HttpRequest, obj: Any, form: Any, change: bool) -> None:
        obj.save(using=conf.database())

    def delete_model(self, request: HttpRequest, obj: Any) -> None:
        obj.delete(using=conf.database())

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> None:
        queryset.using(conf.database()).delete()

    def formfield_for_foreignkey(self, db_field: Any, request: HttpRequest, **kwargs: Any) -> Any:
        return super().formfield_for_foreignkey(db_field, request, using=conf.database(), **kwargs)
