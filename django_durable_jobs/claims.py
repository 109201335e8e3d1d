"""Claiming runnable runs so that no run is ever held by two workers at once."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta

from django.db import connections, transaction
from django.db.models import Case, DateTimeField, F, PositiveIntegerField, Value, When
from django.db.models.functions import Coalesce

from . import conf
from .models import RUNNABLE, JobRun, RunStatus


def claim(
    owner: str,
    *,
    now: datetime,
    lease: timedelta,
    queues: Iterable[str] | None = None,
    limit: int = 1,
) -> list[JobRun]:
    """Take up to ``limit`` runnable runs for ``owner``; the best first.

    The attempt is counted here for queued runs; a run resuming from a sleep or a
    wait keeps its attempt number.
    """
    using = conf.database()
    runs = JobRun.objects.using(using)
    queue_list = None if queues is None else list(queues)
    with transaction.atomic(using=using):
        candidates = runs.runnable(now, queue_list)
        if connections[using].features.has_select_for_update_skip_locked:
            candidates = candidates.select_for_update(skip_locked=True)
        ids = list(candidates.values_list("id", flat=True)[:limit])
        if not ids:
            return []
        # The status guard makes this safe where rows cannot be locked (SQLite
        # serialises writers): a run another worker took meanwhile is not runnable.
        runs.filter(id__in=ids, status__in=RUNNABLE, wake_at__lte=now).update(
            status=RunStatus.RUNNING,
            attempt=Case(
                When(status=RunStatus.QUEUED, then=F("attempt") + 1),
                default=F("attempt"),
                output_field=PositiveIntegerField(),
            ),
            started_at=Coalesce(F("started_at"), Value(now), output_field=DateTimeField()),
            lease_owner=owner,
            lease_expires_at=now + lease,
        )
        claimed = list(runs.filter(id__in=ids, lease_owner=owner, status=RunStatus.RUNNING))
    claimed.sort(key=lambda run: (-run.priority, run.wake_at or now))
    return claimed
