"""The dashboard's charts and the hour's throughput from rollups: runs started and
finished (per status) in each complete minute and each complete hour, counted once and
kept (a ``RunTally`` row each, ``minutes`` and ``hours``).

A bucket also keeps its failures by error code and exception type, for the day's top
errors. Counted from the runs table at every page load, the last hour per minute, the
rolling hour's throughput and the current hour of the per-hour chart were each two
grouped scans of the hour's runs: a million index entries apiece at a million runs an
hour (benchmarks/dashboard.py ``--over 1h``), and the top errors read the day's
failures. Here a reader *folds* each minute once it has
ended (``FOLD_DELAY`` after, as ``observe/counters.py`` does) into the ``minutes`` row,
which keeps the last ``MINUTES.kept``, and each hour into the ``hours`` row, summed from
its minutes when the minute rollup holds them all (from the table otherwise); only the
last minute or two are counted live. Nothing is backfilled up front: the first page
after an upgrade, or after hours without one, folds what it shows (the old cost, once).
Folds write only if no other fold moved the watermark meanwhile, so any number of pages
may load at once.

Like the counters, a minute or an hour counts what happened in it, whatever happens to
the runs later: a run that failed at 10:05 and was retried at 11:00 stays one failure of
10:05 (and counts again when it finishes), and a purge removes nothing from it. A run
whose finish commits more than ``FOLD_DELAY`` after its finish time, in a minute
already folded, is not counted there.
"""

from __future__ import annotations

import functools
import operator
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from django.db.models import Count, Q
from django.db.models.functions import TruncHour, TruncMinute

from .. import conf
from ..models import FINISHED, JobRun, RunStatus, RunTally
from .counters import FOLD_DELAY

#: What each minute and hour counts: starts (first start), then finishes by status.
KEYS = ("started", *FINISHED)
#: And its failures: ``[[error code, exception type, runs], ...]``.
ERRORS = "errors"
MINUTE = timedelta(minutes=1)
HOUR = timedelta(hours=1)
#: A bucket's counts: ``KEYS`` -> runs, and ``ERRORS`` (as stored, JSON).
Tally = dict[str, Any]
Tallies = dict[datetime, Tally]
#: ``[start, end)`` of a time, no end: until now.
Range = tuple[datetime, datetime | None]


def floor(when: datetime, step: timedelta) -> datetime:
    """The start (UTC) of the minute or hour ``when`` is in."""
    when = when.astimezone(UTC).replace(second=0, microsecond=0)
    return when.replace(minute=0) if step >= HOUR else when


@dataclass(frozen=True)
class Rollup:
    """The runs counted per ``step`` (a minute or an hour), the last ``kept`` kept."""

    name: str
    step: timedelta
    kept: int

    def complete_until(self, now: datetime) -> datetime:
        """The end of the last bucket folded at ``now``: earlier ones come from here."""
        return floor(now - FOLD_DELAY, self.step)

    def folded(self, now: datetime) -> Tallies:
        """bucket start -> {key: runs} for each of the ``kept`` complete buckets before
        ``complete_until(now)``, folding those not yet folded."""
        using, until = conf.database(), self.complete_until(now)
        oldest = until - self.kept * self.step
        row, _ = RunTally.objects.using(using).get_or_create(
            name=self.name, defaults={"since": oldest, "folded_until": oldest, "tallies": {}}
        )
        if row.folded_until < until:
            start = max(row.folded_until, oldest)
            kept = {k: v for k, v in row.tallies.items() if datetime.fromisoformat(k) >= oldest}
            new = self._count(using, start, until, now)
            tallies = {**kept, **{when.isoformat(): n for when, n in new.items()}}
            moved = (
                RunTally.objects.using(using)
                .filter(pk=row.pk, folded_until=row.folded_until)
                .update(folded_until=until, tallies=tallies)
            )
            if moved:
                row.tallies = tallies
            else:  # another page folded the same buckets first: show its rollup
                row.refresh_from_db(using=using)
        return {
            when: counts
            for when, counts in ((datetime.fromisoformat(k), v) for k, v in row.tallies.items())
            if oldest <= when < until
        }

    def _count(self, using: str, start: datetime, end: datetime, now: datetime) -> Tallies:
        """Each bucket in ``[start, end)``, zeros included. An hour is the sum of its
        minutes when ``MINUTES`` holds all sixty; the rest are counted from the table."""
        buckets = [start + self.step * i for i in range(int((end - start) / self.step))]
        found: Tallies = {}
        if self.step > MINUTE:
            minutes = MINUTES.folded(now)
            for bucket in buckets:
                parts = [minutes.get(bucket + MINUTE * i) for i in range(int(self.step / MINUTE))]
                if all(part is not None for part in parts):
                    found[bucket] = _sum(part for part in parts if part is not None)
        missing = [bucket for bucket in buckets if bucket not in found]
        if missing:
            ranges: list[Range] = [(missing[0], missing[-1] + self.step)]
            counted = count(using, ranges, self.step, errors=True)
            found.update({bucket: counted.get(bucket, zeros()) for bucket in missing})
        return found


MINUTES = Rollup("minutes", MINUTE, kept=120)
HOURS = Rollup("hours", HOUR, kept=24)


def zeros() -> Tally:
    return {**dict.fromkeys(KEYS, 0), ERRORS: []}


def _sum(parts: Iterable[Tally]) -> Tally:
    total = zeros()
    errors: dict[tuple[str, str], int] = defaultdict(int)
    for part in parts:
        for key in KEYS:
            total[key] += part.get(key, 0)
        for code, error_type, n in part.get(ERRORS, ()):
            errors[(code, error_type)] += n
    total[ERRORS] = [[code, error_type, n] for (code, error_type), n in sorted(errors.items())]
    return total


@dataclass(frozen=True)
class Folded:
    """Both rollups as read (and folded) at ``now``."""

    now: datetime
    hours: Tallies
    minutes: Tallies

    def whole(self, since: datetime) -> tuple[list[Tally], list[Range]]:
        """The complete hours, then minutes, from ``since`` on, and the ranges left to
        count from the table: the part of an hour before the first (none if ``since``
        is on the hour, or the part of a minute when no hour is whole), and the last
        minute or two."""
        tallies: list[Tally] = []
        start: datetime | None = None
        end = since
        for step, folded in ((HOUR, self.hours), (MINUTE, self.minutes)):
            buckets = sorted(bucket for bucket in folded if bucket >= end)
            if not buckets or (start is not None and buckets[0] != end):
                continue  # none whole yet, or not next to the hours: counted live
            tallies += [folded[bucket] for bucket in buckets]
            start = buckets[0] if start is None else start
            end = buckets[-1] + step
        if start is None:
            return [], [(since, None)]
        return tallies, [(since, start), (end, None)]


def read(now: datetime) -> Folded:
    """Both rollups, folded up to ``now``."""
    return Folded(now=now, hours=HOURS.folded(now), minutes=MINUTES.folded(now))


def count(using: str, ranges: list[Range], step: timedelta, *, errors: bool = False) -> Tallies:
    """Runs started and finished in ``ranges`` per ``step``, only the buckets with runs:
    two grouped index range scans (``durable_run_started``, ``durable_run_finished``),
    and with ``errors`` a third, of the failures by error code and exception type."""
    trunc = TruncHour if step >= HOUR else TruncMinute
    runs = JobRun.objects.using(using).order_by()
    found: Tallies = defaultdict(zeros)
    started = (
        runs.filter(_within("started_at", ranges))
        .annotate(bucket=trunc("started_at", tzinfo=UTC))
        .values_list("bucket")
        .annotate(n=Count("*"))
    )
    for bucket, n in started:
        found[bucket]["started"] += n
    ended = (
        runs.filter(_within("finished_at", ranges), status__in=FINISHED)
        .annotate(bucket=trunc("finished_at", tzinfo=UTC))
        .values_list("status", "bucket")
        .annotate(n=Count("*"))
    )
    for status, bucket, n in ended:
        found[bucket][status] += n
    if errors:
        for bucket, tally in failures(using, ranges, step).items():
            found[bucket][ERRORS] = tally[ERRORS]
    return dict(found)


def failures(using: str, ranges: list[Range], step: timedelta) -> Tallies:
    """The runs that failed in ``ranges`` per ``step``, by error code and exception
    type (``ERRORS``): one grouped scan of ``durable_run_finished``."""
    trunc = TruncHour if step >= HOUR else TruncMinute
    found: Tallies = defaultdict(zeros)
    failed = (
        JobRun.objects.using(using)
        .order_by()
        .filter(_within("finished_at", ranges), status=RunStatus.FAILED)
        .annotate(bucket=trunc("finished_at", tzinfo=UTC))
        .values_list("bucket", "error_code", "error_type")
        .annotate(n=Count("*"))
    )
    for bucket, code, error_type, n in failed:
        found[bucket][ERRORS].append([code, error_type, n])
    return dict(found)


def _within(field: str, ranges: list[Range]) -> Q:
    return functools.reduce(
        operator.or_,
        (
            Q(**{f"{field}__gte": start}) & (Q(**{f"{field}__lt": end}) if end else Q())
            for start, end in ranges
        ),
    )
