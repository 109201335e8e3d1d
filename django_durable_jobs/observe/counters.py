"""Counters that only go up, for Prometheus' ``rate()`` and ``histogram_quantile()``:
runs finished by job and status, and their durations in buckets.

Counted from the runs table, they could not be monotonic: a purge deletes finished
runs, and a retry or a replay takes a failed or succeeded run back to queued. So a
scrape *folds* the runs that finished since the last fold into a stored tally (the
``RunTally`` row) and serves the tally: once counted, a run stays counted whatever
happens to its row, and a run that finishes again (retried) counts again. Any number
of processes may serve the metrics: the fold writes only if no other fold moved the
watermark meanwhile (one compare-and-set ``UPDATE``), and the loser serves the
winner's tally.

Counting begins at the first scrape (the counters' ``_created``), and a fold stops
``FOLD_DELAY`` before now, so that a run whose finish is written with a time a little
before it commits is not passed over. What the counters miss, documented in
docs/how-to/operating.md: runs purged before any scrape counted them (scrapes stopped
for longer than ``RETENTION``), and runs whose finish committed more than
``FOLD_DELAY`` after its time. Deleting the row resets them, which Prometheus reads as
a counter reset.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.db import transaction

from .. import conf
from ..models import FINISHED, JobRun, RunTally

#: Upper bounds (seconds) of the duration buckets, from first start to finish: quick
#: runs to runs that slept for days. The last bucket, +Inf, is implied.
BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600, 21600, 86400, 604800)
#: How far behind now a fold stops (see above).
FOLD_DELAY = timedelta(minutes=1)
NAME = "runs"


@dataclass(frozen=True, kw_only=True)
class Tally:
    """One job's finished runs of one status since ``since``."""

    job: str
    status: str
    count: int
    #: Of the runs that started (a run cancelled or skipped while queued did not).
    duration_sum: float
    #: Runs per bucket of ``BUCKETS`` (and a last one, +Inf), not cumulative.
    buckets: list[int]


@dataclass(frozen=True, kw_only=True)
class Counters:
    since: datetime
    folded_until: datetime
    tallies: list[Tally]


def counters(now: datetime) -> Counters:
    """The tally, with the runs finished up to ``now - FOLD_DELAY`` folded in."""
    using, cutoff = conf.database(), now - FOLD_DELAY
    row, _ = RunTally.objects.using(using).get_or_create(
        name=NAME, defaults={"since": cutoff, "folded_until": cutoff, "tallies": {}}
    )
    if row.folded_until < cutoff:
        # In a transaction: ``iterator()`` reads through a server-side cursor, which in
        # autocommit is declared WITH HOLD and fetched by later statements, that a
        # transaction-pooling PgBouncer may send to another server connection.
        with transaction.atomic(using=using):
            tallies = fold(row.tallies, _finished(row.folded_until, cutoff))
        moved = (
            RunTally.objects.using(using)
            .filter(pk=row.pk, folded_until=row.folded_until)
            .update(folded_until=cutoff, tallies=tallies)
        )
        if moved:
            row.folded_until, row.tallies = cutoff, tallies
        else:  # another process folded the same runs first: serve its tally
            row.refresh_from_db(using=using)
    return Counters(since=row.since, folded_until=row.folded_until, tallies=_flat(row.tallies))


def _finished(start: datetime, end: datetime) -> Iterator[tuple[str, str, float | None]]:
    """(job, status, seconds from first start to finish or None) of the runs that
    finished in ``[start, end)``: a range of the ``(status, finished_at)`` index."""
    rows = (
        JobRun.objects.using(conf.database())
        .filter(status__in=FINISHED, finished_at__gte=start, finished_at__lt=end)
        .order_by()
        .values_list("job_name", "status", "started_at", "finished_at")
    )
    for job, status, started_at, finished_at in rows.iterator(chunk_size=2000):
        if started_at is None or finished_at is None:  # never started: counted, no duration
            yield job, status, None
            continue
        took = (finished_at - started_at).total_seconds()
        yield job, status, max(took, 0.0)


def fold(
    tallies: dict[str, Any], finished: Iterator[tuple[str, str, float | None]]
) -> dict[str, Any]:
    """``tallies`` (job -> status -> count, sum, buckets) with ``finished`` added."""
    folded = {job: {s: dict(t) for s, t in by.items()} for job, by in tallies.items()}
    for job, status, took in finished:
        tally = folded.setdefault(job, {}).setdefault(
            status, {"count": 0, "sum": 0.0, "buckets": [0] * (len(BUCKETS) + 1)}
        )
        tally["count"] += 1
        if took is not None:
            tally["sum"] += took
            buckets = list(tally["buckets"])
            buckets[bisect.bisect_left(BUCKETS, took)] += 1  # le: a bound includes itself
            tally["buckets"] = buckets
    return folded


def _flat(tallies: dict[str, Any]) -> list[Tally]:
    return [
        Tally(
            job=job,
            status=status,
            count=t["count"],
            duration_sum=t["sum"],
            buckets=list(t["buckets"]),
        )
        for job, by in sorted(tallies.items())
        for status, t in sorted(by.items())
    ]
