"""The figures of ``observe/stats.py`` in the Prometheus text format, for a scraper.

Needs ``prometheus-client`` (``pip install django-durable-jobs[metrics]``). Mount the
view in your URLconf and protect it as you see fit (a private network, a token in a
middleware, ``staff_member_required``)::

    from django_durable_jobs.observe.metrics import metrics_view

    urlpatterns = [path("metrics/durable-jobs", metrics_view)]

Every figure is computed from the database at scrape time, so any number of web
processes serve the same numbers (no per-process counters to aggregate): gauges, and
the counters and histogram of runs finished (``observe/counters.py`` says how they stay
monotonic when runs are purged or retried).
"""

from __future__ import annotations

from collections.abc import Iterator

from django.core.exceptions import ImproperlyConfigured
from django.http import HttpRequest, HttpResponse

from ..engine import clock
from . import counters, stats

try:
    from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
    from prometheus_client.core import (
        CounterMetricFamily,
        GaugeMetricFamily,
        HistogramMetricFamily,
        Metric,
    )
    from prometheus_client.registry import Collector, CollectorRegistry
except ImportError as exc:  # without the extra (tests/unit/test_optional_extras.py)
    raise ImproperlyConfigured(
        "django_durable_jobs.observe.metrics needs prometheus-client: "
        "pip install 'django-durable-jobs[metrics]'"
    ) from exc

PREFIX = "durable_jobs"
_ESTIMATED = (
    f" Exact up to {stats.EXACT_UP_TO}; above it PostgreSQL's planner estimate "
    "(docs/how-to/operating.md, counts and estimates)."
)


def metrics_view(request: HttpRequest) -> HttpResponse:
    """The current figures, one scrape. Plain Django view: no permission check of its own."""
    now = clock.current().now()
    registry = CollectorRegistry(auto_describe=False)
    registry.register(StatsCollector(stats.collect(now=now), counters.counters(now)))
    return HttpResponse(generate_latest(registry), content_type=CONTENT_TYPE_LATEST)


class StatsCollector(Collector):
    """Turns one ``Stats`` snapshot into metric families."""

    def __init__(self, figures: stats.Stats, totals: counters.Counters | None = None) -> None:
        self.figures = figures
        self.totals = totals

    def collect(self) -> Iterator[Metric]:
        f = self.figures
        runs = _gauge("runs", f"Runs in the table, by status.{_ESTIMATED}", ["status"])
        for status, n in f.runs_by_status.items():
            runs.add_metric([status], n)
        yield runs
        depth = _gauge(
            "queue_depth", f"Unfinished runs, by queue and status.{_ESTIMATED}", ["queue", "status"]
        )
        for queue, counts in f.queue_depth.items():
            for status, n in counts.items():
                depth.add_metric([queue, status], n)
        yield depth
        yield _gauge(
            "oldest_runnable_age_seconds",
            "How long the longest-waiting runnable run has been runnable (0: none is).",
            value=f.oldest_runnable_age_seconds or 0.0,
        )
        yield from self._throughput()
        yield from self._durations()
        errors = _gauge(
            "failed_runs_last_day",
            "Runs failed in the last day, by error code or else exception type (error), "
            "and error code (error_code, empty for a job's own exception).",
            ["error", "error_code"],
        )
        for e in f.top_errors:
            errors.add_metric([e.error, e.code], e.runs)
        yield errors
        yield _gauge("workers_alive", "Worker processes heartbeating.", value=f.workers_alive)
        paused = _gauge(
            "pauses",
            "Queues and jobs paused now, 1 each (their runs are not claimed until resumed); "
            f"count({PREFIX}_pauses) is how many.",
            ["kind", "name"],
        )
        for pause in f.pauses:
            paused.add_metric([pause["kind"], pause["name"]], 1)
        yield paused
        if self.totals is not None:
            yield from self._counters(self.totals)

    def _counters(self, totals: counters.Counters) -> Iterator[Metric]:
        created = totals.since.timestamp()
        finished = CounterMetricFamily(
            f"{PREFIX}_runs_finished",
            "Runs finished, by job and status, since counting began (_created); a purge "
            f"or a retry never lowers it; runs are counted {_delay()} after they finish.",
            labels=["job", "status"],
        )
        durations = HistogramMetricFamily(
            f"{PREFIX}_finished_run_duration_seconds",
            "First start to finish (sleeps and waits included) of the runs counted in "
            f"{PREFIX}_runs_finished_total that started, by job and status.",
            labels=["job", "status"],
        )
        for t in totals.tallies:
            finished.add_metric([t.job, t.status], t.count, created=created)
            if t.count and sum(t.buckets):
                durations.add_metric([t.job, t.status], _cumulative(t.buckets), t.duration_sum)
        yield finished
        yield durations

    def _throughput(self) -> Iterator[Metric]:
        for window, seconds in (("last_minute", 60), ("last_hour", 3600)):
            family = _gauge(
                f"runs_{window}",
                f"Runs started, and runs finished by status, in the last {seconds} seconds. "
                "Deprecated: rate() over durable_jobs_runs_finished_total.",
                ["event"],
            )
            for event, n in self.figures.throughput[window].items():
                family.add_metric([event], n)
            yield family

    def _durations(self) -> Iterator[Metric]:
        family = _gauge(
            "run_duration_seconds",
            "First start to finish of runs that succeeded in the last hour, by percentile. "
            "Deprecated: histogram_quantile() over "
            "durable_jobs_finished_run_duration_seconds_bucket.",
            ["job", "quantile"],
        )
        for job, figures in self.figures.durations.items():
            for p in stats.PERCENTILES:
                family.add_metric([job, str(p / 100)], figures[f"p{p}"])
        yield family


def _gauge(
    name: str, documentation: str, labels: list[str] | None = None, value: float | None = None
) -> GaugeMetricFamily:
    return GaugeMetricFamily(f"{PREFIX}_{name}", documentation, value=value, labels=labels)


def _cumulative(buckets: list[int]) -> list[tuple[str, float]]:
    """Per-bucket counts as Prometheus' cumulative ``le`` buckets, +Inf last."""
    bounds = [*(_bound(b) for b in counters.BUCKETS), "+Inf"]
    total, out = 0, []
    for bound, n in zip(bounds, buckets, strict=True):
        total += n
        out.append((bound, float(total)))
    return out


def _bound(seconds: float) -> str:
    return repr(float(seconds))


def _delay() -> str:
    return f"{int(counters.FOLD_DELAY.total_seconds())}s"
