"""The counters and the histogram of runs finished (observe/counters.py) in the
Prometheus text format: parsed as a scraper parses them, and monotonic when runs are
purged or retried."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.test import Client
from django.urls import reverse
from prometheus_client.parser import text_string_to_metric_families

from django_durable_jobs.engine.clock import FakeClock
from django_durable_jobs.models import JobRun, RunStatus, RunTally
from django_durable_jobs.observe import counters
from django_durable_jobs.verbs import runs
from tests.factories import JobRunFactory

pytestmark = pytest.mark.django_db

FINISHED = "durable_jobs_runs_finished"
DURATION = "durable_jobs_finished_run_duration_seconds"


def scrape() -> dict[str, Any]:
    """name -> the family, as Prometheus' own parser reads the page."""
    response = Client().get(reverse("durable-jobs-metrics"))
    assert response.status_code == 200
    return {f.name: f for f in text_string_to_metric_families(response.content.decode())}


def samples(family: Any, name: str, **labels: str) -> dict[str, float]:
    """Samples ``name`` of ``family`` with ``labels``, keyed by their ``le`` (or "")."""
    return {
        s.labels.get("le", ""): s.value
        for s in family.samples
        if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())
    }


def finish(clock: FakeClock, job: str, status: str, took: float | None, ago: float = 0) -> JobRun:
    end = clock.now() - timedelta(seconds=ago)
    return JobRunFactory.create(
        job_name=job,
        status=status,
        created_at=end - timedelta(seconds=took or 0),
        started_at=None if took is None else end - timedelta(seconds=took),
        finished_at=end,
    )


def later(clock: FakeClock) -> None:
    """Past the fold delay: what finished until now is counted at the next scrape."""
    clock.advance(counters.FOLD_DELAY + timedelta(seconds=1))


def test_counters_and_histogram_in_the_exposition_format(clock: FakeClock) -> None:
    finish(clock, "shop.old", RunStatus.SUCCEEDED, took=1, ago=3600)
    families = scrape()  # counting begins here: the run of an hour ago is not counted
    assert families[FINISHED].type == "counter" and families[FINISHED].samples == []
    began = clock.now() - counters.FOLD_DELAY
    for took in (0.05, 0.3, 4, 7200):
        finish(clock, "shop.pay", RunStatus.SUCCEEDED, took=took)
    finish(clock, "shop.pay", RunStatus.FAILED, took=2)
    finish(clock, "shop.pay", RunStatus.CANCELLED, took=None)  # never started
    later(clock)
    families = scrape()
    finished = families[FINISHED]
    assert samples(finished, f"{FINISHED}_total", job="shop.pay", status="succeeded") == {"": 4}
    assert samples(finished, f"{FINISHED}_total", job="shop.pay", status="failed") == {"": 1}
    assert samples(finished, f"{FINISHED}_total", job="shop.pay", status="cancelled") == {"": 1}
    # When counting began: the text format gives it as a gauge of its own.
    created = families[f"{FINISHED}_created"]
    assert samples(created, f"{FINISHED}_created", job="shop.pay", status="failed") == {
        "": began.timestamp()
    }
    assert not samples(finished, f"{FINISHED}_total", job="shop.old")
    durations = families[DURATION]
    assert durations.type == "histogram"
    buckets = samples(durations, f"{DURATION}_bucket", job="shop.pay", status="succeeded")
    assert list(buckets) == [*(repr(float(b)) for b in counters.BUCKETS), "+Inf"]
    assert buckets["0.05"] == 1  # a bound includes its own value (le)
    assert buckets["0.5"] == 2 and buckets["5.0"] == 3 and buckets["3600.0"] == 3
    assert buckets["21600.0"] == buckets["+Inf"] == 4
    assert list(buckets.values()) == sorted(buckets.values())  # cumulative
    assert samples(durations, f"{DURATION}_count", job="shop.pay", status="succeeded") == {"": 4}
    total = samples(durations, f"{DURATION}_sum", job="shop.pay", status="succeeded")[""]
    assert total == pytest.approx(0.05 + 0.3 + 4 + 7200)
    assert not samples(durations, f"{DURATION}_count", status="cancelled")  # no duration


def test_counters_never_go_down_when_runs_are_purged_or_retried(clock: FakeClock) -> None:
    scrape()
    failed = finish(clock, "shop.pay", RunStatus.FAILED, took=1)
    finish(clock, "shop.pay", RunStatus.SUCCEEDED, took=1)
    later(clock)

    def total(status: str) -> float:
        family = scrape()[FINISHED]
        return samples(family, f"{FINISHED}_total", job="shop.pay", status=status).get("", 0)

    assert (total("failed"), total("succeeded")) == (1, 1)
    runs.retry(failed.pk)  # the failed run is queued again: not failed any more
    runs.purge("0s", [RunStatus.SUCCEEDED], now=clock.now())
    assert not JobRun.objects.filter(status=RunStatus.SUCCEEDED).exists()
    later(clock)
    assert (total("failed"), total("succeeded")) == (1, 1)  # counted stays counted
    JobRun.objects.filter(pk=failed.pk).update(
        status=RunStatus.FAILED, started_at=clock.now(), finished_at=clock.now()
    )
    later(clock)
    assert total("failed") == 2  # it finished again: one more finish
    assert total("failed") == 2  # a scrape with nothing new adds nothing


def test_a_fold_behind_another_serves_the_other_ones_tally(clock: FakeClock) -> None:
    """Two processes scraping at once: the one whose compare-and-set finds the
    watermark moved counts nothing twice."""
    counters.counters(clock.now())
    finish(clock, "shop.pay", RunStatus.SUCCEEDED, took=1)
    later(clock)
    stale = RunTally.objects.get()
    first = counters.counters(clock.now())  # another process folds first
    moved = RunTally.objects.filter(pk=stale.pk, folded_until=stale.folded_until).update(tallies={})
    assert moved == 0  # the stale process's write would change nothing
    again = counters.counters(clock.now())
    assert [t.count for t in first.tallies] == [t.count for t in again.tallies] == [1]
