"""The dashboard's last day per hour, from a rollup: runs started, succeeded and
failed in each complete hour, counted once and kept (a ``RunTally`` row, ``hours``).

Counted from the runs table at every page load, the day was two grouped scans of a
day's runs: a third of a million at 10 million runs a month (benchmarks/scale.py).
Here a reader *folds* each hour once it has ended (``FOLD_DELAY`` after, as
``observe/counters.py`` does), into the row, and keeps the last ``HOURS``; the
current hour is counted live. Nothing is backfilled up front: the first page after
an upgrade folds the day it shows (the old cost, once), and each later hour costs
one hour of runs. Folds write only if no other fold moved the watermark meanwhile,
so any number of pages may load at once.

Like the counters, an hour counts what happened in it, whatever happens to the runs
later: a run that failed at 10:05 and was retried at 11:00 stays one failure of
10:00 (and counts again when it finishes), and a purge removes nothing from it. A
run whose finish commits more than ``FOLD_DELAY`` after its finish time, in an hour
already folded, is not counted there.
"""

from __future__ import annotations

from collections import defaultdict
from datetime import UTC, datetime, timedelta

from django.db.models import Count
from django.db.models.functions import TruncHour

from .. import conf
from ..models import JobRun, RunStatus, RunTally
from .counters import FOLD_DELAY

NAME = "hours"
#: The complete hours kept: the per-hour chart's day.
HOURS = 24
#: What each hour counts: starts (first start), then finishes by status.
KEYS = ("started", RunStatus.SUCCEEDED, RunStatus.FAILED)
HOUR = timedelta(hours=1)


def floor_hour(when: datetime) -> datetime:
    return when.astimezone(UTC).replace(minute=0, second=0, microsecond=0)


def complete_until(now: datetime) -> datetime:
    """The end of the last hour folded at ``now``: hours before it come from the rollup."""
    return floor_hour(now - FOLD_DELAY)


def folded(now: datetime) -> dict[datetime, dict[str, int]]:
    """hour -> {"started", "succeeded", "failed"} for each of the ``HOURS`` complete
    hours before ``complete_until(now)``, folding those not yet folded."""
    using, until = conf.database(), complete_until(now)
    oldest = until - HOURS * HOUR
    row, _ = RunTally.objects.using(using).get_or_create(
        name=NAME, defaults={"since": oldest, "folded_until": oldest, "tallies": {}}
    )
    if row.folded_until < until:
        start = max(row.folded_until, oldest)
        kept = {k: v for k, v in row.tallies.items() if datetime.fromisoformat(k) >= oldest}
        tallies = {**kept, **{h.isoformat(): n for h, n in count(using, start, until).items()}}
        moved = (
            RunTally.objects.using(using)
            .filter(pk=row.pk, folded_until=row.folded_until)
            .update(folded_until=until, tallies=tallies)
        )
        if moved:
            row.tallies = tallies
        else:  # another page folded the same hours first: show its rollup
            row.refresh_from_db(using=using)
    return {
        hour: counts
        for hour, counts in ((datetime.fromisoformat(k), v) for k, v in row.tallies.items())
        if oldest <= hour < until
    }


def count(using: str, start: datetime, end: datetime) -> dict[datetime, dict[str, int]]:
    """Each hour in ``[start, end)`` (zeros included) with its runs counted: two
    grouped index range scans (``durable_run_started``, ``durable_run_finished``)."""
    hours = {start + HOUR * i: dict.fromkeys(KEYS, 0) for i in range(int((end - start) / HOUR))}
    runs = JobRun.objects.using(using).order_by()
    started = (
        runs.filter(started_at__gte=start, started_at__lt=end)
        .annotate(hour=TruncHour("started_at", tzinfo=UTC))
        .values_list("hour")
        .annotate(n=Count("*"))
    )
    found: dict[datetime, dict[str, int]] = defaultdict(lambda: dict.fromkeys(KEYS, 0))
    for hour, n in started:
        found[hour]["started"] += n
    ended = (
        runs.filter(
            status__in=(RunStatus.SUCCEEDED, RunStatus.FAILED),
            finished_at__gte=start,
            finished_at__lt=end,
        )
        .annotate(hour=TruncHour("finished_at", tzinfo=UTC))
        .values_list("status", "hour")
        .annotate(n=Count("*"))
    )
    for status, hour, n in ended:
        found[hour][status] += n
    for hour, counts in found.items():
        if hour in hours:
            hours[hour] = counts
    return hours
