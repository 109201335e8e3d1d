"""A project with ``USE_TZ = False``: Django's supported setting.

Django then stores naive local times (``TIME_ZONE``) and SQLite and MySQL refuse
aware datetimes, while the app's clock is aware. Runs must enqueue, claim, sleep,
wait and finish all the same, the columns holding local time as Django means it.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.urls import reverse
from django.utils import timezone

from django_durable_jobs.db.store import OrmStepStore, put_many
from django_durable_jobs.engine.clock import FakeClock
from django_durable_jobs.engine.records import RecordedStep
from django_durable_jobs.engine.vocabulary import StepStatus
from django_durable_jobs.models import JobRun, RunStatus, StepRecord
from django_durable_jobs.observe import stats
from tests.conftest import Driver
from tests.factories import JobRunFactory
from tests.testapp import jobs
from tests.testapp.admin_jobs import napper


@pytest.fixture
def naive(settings: Any) -> None:
    settings.USE_TZ = False
    settings.TIME_ZONE = "Europe/Paris"


@pytest.mark.django_db
def test_a_flow_runs_with_use_tz_false(naive: None, driver: Driver, clock: FakeClock) -> None:
    clock.set(datetime(2026, 7, 1, 10, 0, tzinfo=UTC))  # 12:00 in Paris
    run = jobs.onboarding.enqueue(7)
    driver.drain()
    assert JobRun.objects.get(pk=run.pk).status == RunStatus.SLEEPING
    clock.advance("3d")
    driver.drain()
    assert JobRun.objects.get(pk=run.pk).status == RunStatus.WAITING
    clock.advance("7d")
    driver.drain()
    run.refresh_from_db()
    assert run.status == RunStatus.SUCCEEDED, run.error
    assert run.result == {"ordered": False, "email": "u7@example.com", "order": None}
    # Read back as aware instants; stored as Paris time, as Django means USE_TZ=False.
    assert run.created_at == datetime(2026, 7, 1, 10, 0, tzinfo=UTC)
    assert JobRun.objects.filter(pk=run.pk, created_at=datetime(2026, 7, 1, 12, 0)).exists()
    sleep = StepRecord.objects.get(run=run, name="sleep:3d")
    assert sleep.wake_at == datetime(2026, 7, 4, 10, 0, tzinfo=UTC)


@pytest.mark.django_db
def test_a_naive_run_after_is_local_time(naive: None, clock: FakeClock) -> None:
    run = jobs.noop.using(run_after=datetime(2026, 3, 1, 9, 30)).enqueue()
    run.refresh_from_db()
    assert run.wake_at == datetime(2026, 3, 1, 8, 30, tzinfo=UTC)
    later = jobs.noop.using(run_after="1h").enqueue()
    later.refresh_from_db()
    assert later.wake_at is not None and timezone.is_aware(later.wake_at)
    assert later.wake_at == clock.now() + timedelta(hours=1)


@pytest.mark.django_db
def test_the_admin_shows_runs_with_use_tz_false(
    naive: None, driver: Driver, clock: FakeClock, admin_client: Any
) -> None:
    run = napper.enqueue()
    driver.drain()
    listing = admin_client.get(reverse("admin:django_durable_jobs_jobrun_changelist"))
    assert listing.status_code == 200
    year = admin_client.get(
        reverse("admin:django_durable_jobs_jobrun_changelist"), {"created_at__year": "2026"}
    )
    assert year.status_code == 200 and str(run.pk)[:8] in year.content.decode()
    page = admin_client.get(reverse("admin:django_durable_jobs_jobrun_change", args=[run.pk]))
    assert page.status_code == 200 and "sleep:3d" in page.content.decode()


@pytest.mark.django_db
def test_a_limited_run_is_claimed_with_use_tz_false(naive: None, clock: FakeClock) -> None:
    """Concurrency and throttle claims write ``started_at`` like every other claim."""
    from django_durable_jobs.db.flow import limits as flow
    from tests.testapp import flow_jobs

    clock.set(datetime(2026, 7, 1, 10, 0, tzinfo=UTC))
    limited = flow_jobs.per_customer.enqueue(customer_id=42)
    throttled = flow_jobs.throttled.enqueue(1)
    now = clock.now()
    claimed, _ = flow.claim_limited("naive-worker", now=now, lease=timedelta(minutes=1), limit=5)
    assert {run.pk for run in claimed} == {limited.pk, throttled.pk}
    for run in claimed:
        assert run.status == RunStatus.RUNNING
        assert run.started_at == now
        assert JobRun.objects.filter(pk=run.pk, started_at=datetime(2026, 7, 1, 12, 0)).exists()


@pytest.mark.django_db(transaction=True)
def test_step_records_written_together_hold_local_time(naive: None) -> None:
    """The async lane's batched step write (PostgreSQL: one JSON document) stores the
    times as a record written alone does: Paris time in the column, the instant back."""
    at = datetime(2026, 7, 1, 10, 0, tzinfo=UTC)
    runs = [JobRunFactory.create(status="running", lease_owner=f"w{i}") for i in range(3)]
    items = [
        (
            OrmStepStore(owner=run.lease_owner),
            RecordedStep(
                run_id=str(run.id),
                name="s",
                status=StepStatus.COMPLETED,
                started_at=at,
                completed_at=at + timedelta(seconds=1),
                attempts=1,
                output=None,
            ),
        )
        for run in runs
    ]
    assert put_many(items[:2]) == [None, None]
    items[2][0].put(items[2][1])
    for run in runs:
        record = StepRecord.objects.get(run=run, name="s")
        assert (record.started_at, record.completed_at) == (at, at + timedelta(seconds=1))
    local = datetime(2026, 7, 1, 12, 0)
    assert StepRecord.objects.filter(name="s", started_at=local).count() == 3


@pytest.mark.django_db
def test_the_dashboard_and_stats_count_runs_with_use_tz_false(
    naive: None, clock: FakeClock, admin_client: Any
) -> None:
    clock.advance("1d10h30m")
    for minutes_ago, status in (
        (90, RunStatus.FAILED),
        (20, RunStatus.SUCCEEDED),
        (0.2, RunStatus.SUCCEEDED),
    ):
        end = clock.now() - timedelta(minutes=minutes_ago)
        JobRunFactory.create(status=status, started_at=end - timedelta(seconds=1), finished_at=end)
    for _ in range(2):  # the first folds the rollups, the second reads them
        page = admin_client.get(reverse("admin:django_durable_jobs_dashboard_changelist"))
        assert page.status_code == 200
        assert "succeeded 2</li>" in page.content.decode()  # the hour's: 20 min and 12 s ago
    figures = stats.collect(now=clock.now())
    assert figures.throughput["last_hour"]["succeeded"] == 2
    assert figures.throughput["last_minute"]["succeeded"] == 1
    assert [e.runs for e in figures.top_errors] == [1]
