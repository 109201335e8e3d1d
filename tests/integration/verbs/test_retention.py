"""``DURABLE_JOBS["RETENTION"]``: old finished runs purged by an hourly schedule."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from django_durable_jobs.checks import check_settings
from django_durable_jobs.definitions.registry import unregister
from django_durable_jobs.engine.clock import FakeClock
from django_durable_jobs.models import JobRun, RunStatus, Schedule
from django_durable_jobs.verbs import retention
from django_durable_jobs.verbs.schedules import start_due, sync
from tests.conftest import Driver

T0 = datetime(2026, 2, 1, 12, 0, tzinfo=UTC)


@pytest.fixture
def retained(settings: Any) -> Iterator[None]:
    settings.DURABLE_JOBS = {"RETENTION": {"succeeded": "7d", "failed": "30d"}}
    assert check_settings() == []
    retention.install()
    yield
    unregister(retention.JOB_NAME)


def finished(status: str, age: timedelta, now: datetime) -> JobRun:
    return JobRun.objects.create(
        job_name="tests.noop", status=status, created_at=now - age, finished_at=now - age
    )


@pytest.mark.django_db
@pytest.mark.usefixtures("retained")
def test_the_retention_schedule_purges_old_finished_runs(clock: FakeClock, driver: Driver) -> None:
    clock.set(T0)
    assert sync(clock.now()).created == 1
    schedule = Schedule.objects.get(job_name=retention.JOB_NAME)
    assert (schedule.cron, schedule.timezone) == ("17 * * * *", "UTC")
    kept = [
        finished(RunStatus.SUCCEEDED, timedelta(days=6), T0),
        finished(RunStatus.FAILED, timedelta(days=29), T0),
        finished(RunStatus.CANCELLED, timedelta(days=400), T0),  # no age given: kept
    ]
    finished(RunStatus.SUCCEEDED, timedelta(days=8), T0)
    finished(RunStatus.FAILED, timedelta(days=31), T0)
    clock.set(T0 + timedelta(minutes=17))
    (run,) = start_due(clock.now()).started
    driver.drain()
    run.refresh_from_db()
    assert run.status == RunStatus.SUCCEEDED
    assert run.result == {"failed": 1, "succeeded": 1}
    left = set(JobRun.objects.exclude(pk=run.pk).values_list("pk", flat=True))
    assert left == {r.pk for r in kept}


@pytest.mark.django_db
def test_turning_retention_off_disables_its_schedule(clock: FakeClock, settings: Any) -> None:
    clock.set(T0)
    settings.DURABLE_JOBS = {"RETENTION": {"succeeded": "7d"}}
    retention.install()
    sync(clock.now())
    unregister(retention.JOB_NAME)  # a deploy without RETENTION
    settings.DURABLE_JOBS = {}
    retention.install()
    assert sync(clock.now()).disabled == 1
    assert not Schedule.objects.get(job_name=retention.JOB_NAME).enabled
