"""The figures of ``observe/stats.py`` in the Prometheus text format, for a scraper.

Needs ``prometheus-client`` (``pip install django-durable-jobs[metrics]``). Mount the
view in your URLconf and protect it as you see fit (a private network, a token in a
middleware, ``staff_member_required``)::

    from django_durable_jobs.observe.metrics import metrics_view

    urlpatterns = [path("metrics/durable-jobs", metrics_view)]

Every figure is a gauge computed from the database at scrape time, so any number of
web processes serve the same numbers (no per-process counters to aggregate).
"""

from __future__ import annotations

from collections.abc import Iterator

from django.core.exceptions import ImproperlyConfigured
from django.http import HttpRequest, HttpResponse

from ..engine import clock
from . import stats

try:
    from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
    from prometheus_client.core import GaugeMetricFamily, Metric
    from prometheus_client.registry import Collector, CollectorRegistry
except ImportError as exc:  # without the extra (tests/unit/test_optional_extras.py)
    raise ImproperlyConfigured(
        "django_durable_jobs.observe.metrics needs prometheus-client: "
        "pip install 'django-durable-jobs[metrics]'"
    ) from exc

PREFIX = "durable_jobs"


def metrics_view(request: HttpRequest) -> HttpResponse:
    """The current figures, one scrape. Plain Django view: no permission check of its own."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(StatsCollector(stats.collect(now=clock.current().now())))
    return HttpResponse(generate_latest(registry), content_type=CONTENT_TYPE_LATEST)


class StatsCollector(Collector):
    """Turns one ``Stats`` snapshot into metric families."""

    def __init__(self, figures: stats.Stats) -> None:
        self.figures = figures

    def collect(self) -> Iterator[Metric]:
        f = self.figures
        runs = _gauge("runs", "Runs in the table, by status.", ["status"])
        for status, n in f.runs_by_status.items():
            runs.add_metric([status], n)
        yield runs
        depth = _gauge("queue_depth", "Unfinished runs, by queue and status.", ["queue", "status"])
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
            errors.add_metric([e.error, e.code], e.count)
        yield errors
        yield _gauge("workers_alive", "Worker processes heartbeating.", value=f.workers_alive)

    def _throughput(self) -> Iterator[Metric]:
        for window, seconds in (("last_minute", 60), ("last_hour", 3600)):
            family = _gauge(
                f"runs_{window}",
                f"Runs started, and runs finished by status, in the last {seconds} seconds.",
                ["event"],
            )
            for event, n in self.figures.throughput[window].items():
                family.add_metric([event], n)
            yield family

    def _durations(self) -> Iterator[Metric]:
        family = _gauge(
            "run_duration_seconds",
            "First start to finish of runs that succeeded in the last hour, by percentile.",
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
