"""The figures an operator watches (docs/how-to/operating.md): runs by status, queue depth,
the oldest runnable run's age, throughput, duration percentiles per job, top errors (by
code or exception type) and live workers. ``jobs stats``, the metrics view and the
dashboard read them here, from ``READ_DATABASE`` when one is set: a replica's lag of
seconds does not change what they say (docs/explanation/past-one-database.md).

Each figure is one aggregate query that an index serves (see the indexes on
``JobRun``) over a bounded window, or a count that stays bounded at any size
(``counts.py``: exact up to ``EXACT_UP_TO``, on PostgreSQL the planner's estimate
above it, listed in ``Stats.estimates``); the runs started and finished per minute and
per hour, and the last hour's throughput, come from rollups (``rollups.py``).
benchmarks/dashboard.py times them at 1,000,000 runs (``--over 1h``: in one hour),
benchmarks/scale.py (``dashboard_ms``, ``stats_ms``) at 10 million.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta
from typing import Any, NamedTuple

from .. import conf
from ..db import dialect
from ..engine.serialization import shown_type
from ..models import JobRun, Pause, RunStatus, Worker, WorkerStatus
from . import rollups
from .counts import EXACT_UP_TO, PENDING, by_status, depth

__all__ = ["EXACT_UP_TO", "PENDING", "Stats", "collect", "series"]
#: Percentiles of run durations, reported per job.
PERCENTILES = (50, 95, 99)
#: The newest succeeded runs per window whose durations make the percentiles: enough
#: for a steady estimate, bounded so that a busy hour costs the same as a quiet one.
DURATION_SAMPLE = 10_000
TOP_ERRORS = 10
#: How failures with neither an error code nor an exception type are counted.
NO_ERROR = "(none)"


class ErrorCount(NamedTuple):
    """Failed runs that share an ``error``: our error code when the failure has one
    (``X_JOB_TIMEOUT``), else the type of the exception the job raised, as a traceback
    shows it (``ValueError``, ``shop.errors.CardDeclined``), as ``jobs list`` does."""

    error: str
    #: The error code, or "" when ``error`` is an exception type.
    code: str
    #: How many failed runs (``count`` in ``jobs stats --json``).
    runs: int


@dataclass(frozen=True, kw_only=True)
class Stats:
    """A snapshot taken at ``now``; ``as_json`` gives the ``jobs stats --json`` object."""

    now: datetime
    runs_by_status: dict[str, int]
    queue_depth: dict[str, dict[str, int]]
    oldest_runnable_age_seconds: float | None
    #: Runs that started, succeeded, failed and were cancelled in the last minute / hour.
    throughput: dict[str, dict[str, int]]
    #: job -> {"count": n, "p50": s, "p95": s, "p99": s} over the last hour's successes.
    durations: dict[str, dict[str, float]]
    #: Failed runs of the last day by error code or exception type, most frequent first.
    top_errors: list[ErrorCount]
    workers_alive: int
    #: The queues and jobs paused: {"kind", "name", "reason", "paused_by", "paused_at"}.
    pauses: list[dict[str, str]] = field(default_factory=list)
    #: The figures that are estimates, not counts, as paths into ``as_json``:
    #: ``runs_by_status.succeeded``, ``queue_depth.mail.queued`` (``counts.py``).
    estimates: list[str] = field(default_factory=list)

    def as_json(self) -> dict[str, Any]:
        value = asdict(self)
        value["now"] = self.now.isoformat()
        value["top_errors"] = [
            {"error": e.error, "code": e.code, "count": e.runs} for e in self.top_errors
        ]
        return value


def collect(*, now: datetime, folded: rollups.Folded | None = None) -> Stats:
    """The figures at ``now``; ``folded``: the rollups as already read at ``now`` (the
    dashboard reads them once for these figures and its charts)."""
    using = conf.read_database()
    statuses, estimated = by_status(using)
    queues, pairs = depth(using, estimated)
    folded = folded or rollups.read(now)
    return Stats(
        now=now,
        runs_by_status=statuses,
        queue_depth=queues,
        oldest_runnable_age_seconds=oldest_runnable_age(now),
        throughput={
            "last_minute": throughput(now - timedelta(minutes=1), folded),
            "last_hour": throughput(now - timedelta(hours=1), folded),
        },
        durations=durations(now - timedelta(hours=1)),
        top_errors=top_errors(now - timedelta(days=1), folded),
        workers_alive=workers_alive(now),
        pauses=pauses(),
        estimates=[
            *(f"runs_by_status.{status}" for status in estimated),
            *(f"queue_depth.{pair}" for pair in pairs),
        ],
    )


def pauses() -> list[dict[str, str]]:
    """The queues and jobs paused (``verbs/pauses.py``), queues first, by name."""
    rows = Pause.objects.using(conf.database()).order_by("-kind", "name")
    return [
        {
            "kind": pause.kind,
            "name": pause.name,
            "reason": pause.reason,
            "paused_by": pause.paused_by,
            "paused_at": pause.paused_at.isoformat(),
        }
        for pause in rows
    ]


def _runs() -> Any:
    return JobRun.objects.using(conf.read_database()).order_by()


def runs_by_status() -> dict[str, int]:
    """Every status, zeros included (estimated above ``EXACT_UP_TO`` on PostgreSQL)."""
    return by_status(conf.read_database())[0]


def queue_depth() -> dict[str, dict[str, int]]:
    """queue -> {status: runs} for runs not finished (queued, sleeping, waiting,
    running), estimated as ``collect`` does."""
    using = conf.read_database()
    return depth(using, by_status(using)[1])[0]


def oldest_runnable_age(now: datetime) -> float | None:
    """Seconds since the longest-waiting runnable run became runnable; None if none is."""
    oldest = dialect.of(conf.read_database()).oldest_due(_runs(), now)
    return None if oldest is None else max((now - oldest).total_seconds(), 0.0)


def throughput(since: datetime, folded: rollups.Folded) -> dict[str, int]:
    """Runs started (first start) and runs finished, per status, since ``since``: the
    whole hours and minutes from their rollups (``rollups.py``), the rest counted live."""
    tallies, ranges = folded.whole(since)
    live = rollups.count(conf.read_database(), ranges, rollups.MINUTE)
    counts = dict.fromkeys(rollups.KEYS, 0)
    for tally in [*tallies, *live.values()]:
        for key in counts:
            counts[key] += tally.get(key, 0)
    return counts


def durations(since: datetime) -> dict[str, dict[str, float]]:
    """Percentiles of first start to finish (sleeps and waits included) per job, over
    the newest ``DURATION_SAMPLE`` runs that succeeded since ``since``."""
    rows = (
        _runs()
        .filter(status=RunStatus.SUCCEEDED, finished_at__gte=since, started_at__isnull=False)
        .order_by("-finished_at")
        .values_list("job_name", "started_at", "finished_at")[:DURATION_SAMPLE]
    )
    seconds: dict[str, list[float]] = defaultdict(list)
    for job_name, started_at, finished_at in rows:
        seconds[job_name].append(max((finished_at - started_at).total_seconds(), 0.0))
    return {job: _percentiles(sorted(values)) for job, values in sorted(seconds.items())}


def _percentiles(ordered: list[float]) -> dict[str, float]:
    """Nearest-rank percentiles of a sorted, non-empty list."""
    figures: dict[str, float] = {"count": len(ordered)}
    for p in PERCENTILES:
        rank = max(-(-p * len(ordered) // 100), 1)  # ceil(p/100 * n), at least 1
        figures[f"p{p}"] = ordered[rank - 1]
    return figures


def top_errors(since: datetime, folded: rollups.Folded, most: int = TOP_ERRORS) -> list[ErrorCount]:
    """The runs that failed since ``since``, by error code or, without one, by the
    exception's type, most frequent first: the whole hours and minutes from their
    rollups (``rollups.py``), the rest counted live. Most failures are the job's own
    exceptions (``ValueError: card declined``), which have no code: grouped by code
    alone they would all be one anonymous bar."""
    tallies, ranges = folded.whole(since)
    live = rollups.failures(conf.read_database(), ranges, rollups.HOUR)
    counts: dict[tuple[str, str], int] = defaultdict(int)
    for tally in [*tallies, *live.values()]:
        for code, error_type, n in tally.get(rollups.ERRORS, ()):
            counts[(code or shown_type(error_type) or NO_ERROR, code)] += n
    ranked = sorted(counts.items(), key=lambda item: (-item[1], item[0]))
    return [ErrorCount(error, code, n) for (error, code), n in ranked[:most]]


def workers_alive(now: datetime) -> int:
    since = now - conf.required_duration("LEASE")
    return (
        Worker.objects.using(conf.read_database())
        .filter(status=WorkerStatus.LIVE, last_heartbeat__gte=since)
        .count()
    )


@dataclass(frozen=True, kw_only=True)
class Series:
    """Runs started, succeeded and failed per bucket of ``step``, oldest bucket first;
    ``starts[i]`` is when bucket ``i`` begins (UTC)."""

    step: timedelta
    starts: list[datetime]
    counts: dict[str, list[int]]


SERIES_KEYS = ("started", RunStatus.SUCCEEDED, RunStatus.FAILED)


def series(
    now: datetime, *, step: timedelta, buckets: int, folded: rollups.Folded | None = None
) -> Series:
    """The complete minutes and hours from their rollups (``rollups.py``; ``folded``:
    as already read at ``now``); the current hour from its complete minutes; the last
    minute or two counted live (two grouped index range scans).

    ``step`` is a minute or an hour: buckets are truncated in UTC, so that an hour is
    the same hour in every time zone with a half-hour offset too."""
    folded = folded or rollups.read(now)
    last = rollups.floor(now, step)
    first = last - step * (buckets - 1)
    starts = [first + step * i for i in range(buckets)]
    counts = {key: [0] * buckets for key in SERIES_KEYS}

    def put(bucket: datetime, tally: dict[str, int]) -> None:
        if first <= bucket <= last:
            for key in SERIES_KEYS:
                counts[key][int((bucket - first) / step)] += tally.get(key, 0)

    live_from = first
    read = [(rollups.HOURS, folded.hours)] if step == rollups.HOUR else []
    for rollup, tallies in [*read, (rollups.MINUTES, folded.minutes)]:
        for when, tally in tallies.items():
            if when >= live_from:  # not in a coarser rollup's buckets already
                put(rollups.floor(when, step), tally)
        live_from = max(live_from, rollup.complete_until(now))
    for bucket, tally in rollups.count(conf.read_database(), [(live_from, None)], step).items():
        put(bucket, tally)
    return Series(step=step, starts=starts, counts=counts)
