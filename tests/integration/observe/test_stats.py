"""The operator's figures: ``stats.collect``, ``jobs stats [--json]`` and the
Prometheus metrics view, on runs written at known times."""

from __future__ import annotations

import json
from datetime import timedelta
from io import StringIO
from typing import Any

import pytest
from django.core.management import call_command
from django.db import connection
from django.test import Client
from django.urls import reverse
from prometheus_client.parser import text_string_to_metric_families

from django_durable_jobs.engine.clock import FakeClock
from django_durable_jobs.models import JobRun, RunStatus
from django_durable_jobs.observe import counts, stats
from django_durable_jobs.worker import presence
from tests.factories import JobRunFactory

pytestmark = pytest.mark.django_db


def finished(
    clock: FakeClock, job: str, status: str, took: float, ago: float, code: str = ""
) -> JobRun:
    """A run of ``job`` that finished ``ago`` seconds before now after ``took`` seconds."""
    end = clock.now() - timedelta(seconds=ago)
    start = end - timedelta(seconds=took)
    return JobRunFactory.create(
        job_name=job,
        status=status,
        created_at=start,
        started_at=start,
        finished_at=end,
        error_code=code,
    )


@pytest.fixture
def history(clock: FakeClock) -> None:
    """Ten quick successes of shop.a in the last hour (1s..10s), two of shop.b, failures
    with codes, an old failure, a backlog and a running run."""
    for i in range(1, 11):
        finished(clock, "shop.a", RunStatus.SUCCEEDED, took=i, ago=i * 60 - 30)
    finished(clock, "shop.b", RunStatus.SUCCEEDED, took=0.5, ago=10)
    finished(clock, "shop.b", RunStatus.SUCCEEDED, took=2, ago=7200)  # outside the hour
    for _ in range(3):
        finished(clock, "shop.c", RunStatus.FAILED, took=1, ago=20, code="X_JOB_TIMEOUT")
    finished(clock, "shop.c", RunStatus.FAILED, took=1, ago=3600 * 5, code="X_CHILD_FAILED")
    finished(clock, "shop.c", RunStatus.FAILED, took=1, ago=3600 * 30, code="X_NON_RETRIABLE")
    now = clock.now()
    JobRunFactory(status=RunStatus.QUEUED, queue="mail", wake_at=now - timedelta(seconds=90))
    JobRunFactory(status=RunStatus.QUEUED, queue="mail", wake_at=now - timedelta(seconds=5))
    JobRunFactory(status=RunStatus.QUEUED, queue="mail", wake_at=now + timedelta(hours=1))
    JobRunFactory(status=RunStatus.SLEEPING, wake_at=now + timedelta(days=1))
    JobRunFactory(status=RunStatus.RUNNING, started_at=now - timedelta(seconds=30))
    presence.register("w1", queues=None, concurrency=1, now=now)


@pytest.mark.usefixtures("history")
def test_collect(clock: FakeClock, django_assert_num_queries: Any) -> None:
    stats.collect(now=clock.now())  # the first folds the minutes into their rollup
    # 10 figures and the pauses, the throughputs each reading the minute rollup (+2);
    # PostgreSQL counts each status on its own, bounded (+7), and finds the oldest due
    # run per priority (one in use here: +2)
    with django_assert_num_queries(13 + (9 if connection.vendor == "postgresql" else 0)):
        figures = stats.collect(now=clock.now())
    assert figures.runs_by_status == {
        "queued": 3,
        "running": 1,
        "sleeping": 1,
        "waiting": 0,
        "succeeded": 12,
        "failed": 5,
        "cancelled": 0,
        "skipped": 0,  # every status is present, flow control's too
    }
    assert figures.queue_depth == {
        "default": {"queued": 0, "sleeping": 1, "waiting": 0, "running": 1},
        "mail": {"queued": 3, "sleeping": 0, "waiting": 0, "running": 0},
    }
    assert figures.oldest_runnable_age_seconds == 90.0  # the future one is not runnable
    assert figures.throughput["last_minute"] == {
        "started": 6,  # the newest shop.a and shop.b, 3 failures, the running run
        "succeeded": 2,
        "failed": 3,
        "cancelled": 0,
        "skipped": 0,
    }
    assert figures.throughput["last_hour"]["succeeded"] == 11
    assert figures.durations["shop.a"] == {"count": 10, "p50": 5.0, "p95": 10.0, "p99": 10.0}
    assert figures.durations["shop.b"] == {"count": 1, "p50": 0.5, "p95": 0.5, "p99": 0.5}
    assert figures.top_errors == [
        ("X_JOB_TIMEOUT", "X_JOB_TIMEOUT", 3),
        ("X_CHILD_FAILED", "X_CHILD_FAILED", 1),
    ]
    assert figures.workers_alive == 1


def test_empty_table(clock: FakeClock) -> None:
    figures = stats.collect(now=clock.now())
    assert set(figures.runs_by_status) == set(RunStatus.values)
    assert set(figures.runs_by_status.values()) == {0}
    assert figures.oldest_runnable_age_seconds is None
    assert (figures.durations, figures.top_errors, figures.queue_depth) == ({}, [], {})


@pytest.mark.usefixtures("history")
def test_jobs_stats_json(clock: FakeClock) -> None:
    out = StringIO()
    call_command("jobs", "stats", "--json", stdout=out)
    value = json.loads(out.getvalue())
    assert value["runs_by_status"]["succeeded"] == 12
    assert set(value["runs_by_status"]) == set(RunStatus.values)
    assert value["oldest_runnable_age_seconds"] == 90.0
    assert value["top_errors"][0] == {"error": "X_JOB_TIMEOUT", "code": "X_JOB_TIMEOUT", "count": 3}
    assert value["durations"]["shop.a"]["p95"] == 10.0
    assert value["now"] == clock.now().isoformat()


@pytest.mark.usefixtures("history")
def test_jobs_stats_text(clock: FakeClock) -> None:
    lines = StringIO()
    call_command("jobs", "stats", stdout=lines)  # the clock fixture is the process's clock
    text = lines.getvalue()
    assert "oldest runnable 1m30s" in text
    assert "queue mail: queued 3  sleeping 0  waiting 0  running 0" in text
    assert "job shop.a: 10 succeeded in the last hour  p50 5s  p95 10s  p99 10s" in text
    assert "error X_JOB_TIMEOUT: 3 failed runs in the last day" in text


@pytest.mark.usefixtures("history")
def test_metrics_view_parses_as_prometheus_text(clock: FakeClock) -> None:
    response = Client().get(reverse("durable-jobs-metrics"))
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/plain")
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(response.content.decode())
        for s in family.samples
    }
    assert samples[("durable_jobs_runs", (("status", "failed"),))] == 5
    assert samples[("durable_jobs_runs", (("status", "waiting"),))] == 0
    assert samples[("durable_jobs_queue_depth", (("queue", "mail"), ("status", "queued")))] == 3
    assert samples[("durable_jobs_oldest_runnable_age_seconds", ())] == 90
    assert samples[("durable_jobs_runs_last_minute", (("event", "failed"),))] == 3
    assert (
        samples[("durable_jobs_run_duration_seconds", (("job", "shop.a"), ("quantile", "0.5")))]
        == 5
    )
    timeouts = (("error", "X_JOB_TIMEOUT"), ("error_code", "X_JOB_TIMEOUT"))
    assert samples[("durable_jobs_failed_runs_last_day", timeouts)] == 3
    assert samples[("durable_jobs_workers_alive", ())] == 1


def failed_with(clock: FakeClock, error_type: str, message: str, code: str = "") -> None:
    run = finished(clock, "shop.pay", RunStatus.FAILED, took=1, ago=60, code=code)
    JobRun.objects.filter(pk=run.pk).update(error_type=error_type, error=message)


@pytest.fixture
def plain_failures(clock: FakeClock) -> None:
    """The job's own exceptions (no error code) outnumber our coded failures."""
    for _ in range(3):
        failed_with(clock, "builtins.ValueError", "card declined")
    failed_with(clock, "shop.errors.CardExpired", "expired")
    failed_with(clock, "django_durable_jobs.exceptions.JobTimeout", "took 10m", "X_JOB_TIMEOUT")
    failed_with(clock, "", "")


@pytest.mark.usefixtures("plain_failures")
def test_top_errors_name_the_exception_type_of_a_failure_without_a_code(clock: FakeClock) -> None:
    assert stats.collect(now=clock.now()).top_errors == [
        ("ValueError", "", 3),
        ("(none)", "", 1),
        ("X_JOB_TIMEOUT", "X_JOB_TIMEOUT", 1),
        ("shop.errors.CardExpired", "", 1),
    ]
    out = StringIO()
    call_command("jobs", "stats", stdout=out)
    assert "error ValueError: 3 failed runs in the last day" in out.getvalue()
    out = StringIO()
    call_command("jobs", "stats", "--json", stdout=out)
    assert json.loads(out.getvalue())["top_errors"][0] == {
        "error": "ValueError",
        "code": "",
        "count": 3,
    }


@pytest.mark.usefixtures("plain_failures")
def test_metrics_count_failures_by_exception_type(clock: FakeClock) -> None:
    text = Client().get(reverse("durable-jobs-metrics")).content.decode()
    failed = {
        tuple(sorted(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == "durable_jobs_failed_runs_last_day"
    }
    assert failed[(("error", "ValueError"), ("error_code", ""))] == 3
    assert failed[(("error", "shop.errors.CardExpired"), ("error_code", ""))] == 1


def estimating() -> bool:
    return connection.vendor == "postgresql"


@pytest.mark.usefixtures("history")
def test_counts_above_the_exact_limit_are_labelled_estimates_on_postgresql(
    clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(counts, "EXACT_UP_TO", 2)  # 12 succeeded, 3 queued in mail
    figures = stats.collect(now=clock.now())
    out, text = StringIO(), StringIO()
    call_command("jobs", "stats", "--json", stdout=out)
    call_command("jobs", "stats", stdout=text)
    listed = json.loads(out.getvalue())["estimates"]
    assert ("succeeded ~" in text.getvalue()) == estimating()
    assert "running 1 " in text.getvalue()  # a count stays plain
    if not estimating():  # MariaDB, MySQL, SQLite count exactly at every size
        assert figures.estimates == listed == []
        assert figures.runs_by_status["succeeded"] == 12
        assert figures.queue_depth["mail"]["queued"] == 3
        return
    assert (
        set(figures.estimates)
        == set(listed)
        == {
            "runs_by_status.succeeded",
            "runs_by_status.failed",
            "runs_by_status.queued",
            # a queue of more runnable runs than the limit, for the estimated statuses
            "queue_depth.mail.queued",
        }
    )
    assert figures.runs_by_status["succeeded"] >= 3  # never below the runs seen
    # exact at or under the limit: a count, not an estimate
    assert (figures.runs_by_status["running"], figures.runs_by_status["sleeping"]) == (1, 1)
    assert figures.queue_depth["default"]["sleeping"] == 1
    assert figures.queue_depth["default"]["queued"] == 0  # a small queue: counted


@pytest.mark.usefixtures("history")
def test_an_estimate_follows_the_tables_statistics(
    clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    if not estimating():
        pytest.skip("PostgreSQL estimates; the others count")
    monkeypatch.setattr(counts, "EXACT_UP_TO", 2)
    with connection.cursor() as cursor:  # what autovacuum does as the table grows
        cursor.execute(f"ANALYZE {JobRun._meta.db_table}")
    figures = stats.collect(now=clock.now())
    # ANALYZE read every row of this small table: the planner knows them all
    assert (figures.runs_by_status["succeeded"], figures.runs_by_status["failed"]) == (12, 5)
    assert figures.queue_depth["mail"]["queued"] == 3


@pytest.mark.usefixtures("history")
def test_the_page_marks_estimates(
    admin_client: Client, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(counts, "EXACT_UP_TO", 2)
    html = admin_client.get(reverse("admin:django_durable_jobs_dashboard_changelist")).content
    text = html.decode()
    assert ("≈ an estimate" in text) == estimating()
    assert ("succeeded ≈" in text) == estimating()
    assert ("queued ≈" in text) == estimating()  # the queue depth's bar
    assert "running 1<" in text  # exact stays plain


def test_the_oldest_runnable_run_is_found_across_priorities(clock: FakeClock) -> None:
    now = clock.now()
    JobRunFactory(status=RunStatus.SLEEPING, priority=9, wake_at=now + timedelta(days=1))
    JobRunFactory(status=RunStatus.QUEUED, priority=5, wake_at=now - timedelta(seconds=40))
    JobRunFactory(status=RunStatus.WAITING, priority=-3, wake_at=now - timedelta(seconds=70))
    JobRunFactory(status=RunStatus.QUEUED, priority=-3, wake_at=now - timedelta(seconds=10))
    JobRunFactory(status=RunStatus.RUNNING, priority=0, wake_at=now - timedelta(hours=1))
    assert stats.oldest_runnable_age(now) == 70.0  # not the running run, not the sleeper
