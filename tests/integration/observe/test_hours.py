"""The dashboard's last day per hour from its rollup (observe/hours.py): each hour
counted once it has ended, kept when its runs are retried or purged, folded by one
reader when two load the page at once, and the current hour counted live."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from django_durable_jobs.engine.clock import FakeClock
from django_durable_jobs.models import JobRun, RunStatus, RunTally
from django_durable_jobs.observe import counters, hours, stats
from django_durable_jobs.verbs import runs
from tests.factories import JobRunFactory

pytestmark = pytest.mark.django_db

HOUR = timedelta(hours=1)


def finish(clock: FakeClock, status: str, minutes_ago: float) -> JobRun:
    end = clock.now() - timedelta(minutes=minutes_ago)
    return JobRunFactory.create(
        job_name="shop.pay",
        status=status,
        created_at=end - timedelta(seconds=2),
        started_at=end - timedelta(seconds=2),
        finished_at=end,
    )


def day(clock: FakeClock) -> dict[str, list[int]]:
    return stats.series(clock.now(), step=HOUR, buckets=24).counts


def test_an_ended_hour_is_counted_once_and_kept_through_retries_and_purges(
    clock: FakeClock,
) -> None:
    clock.advance("10h30m")  # 10:30: 09:00 has ended, 10:00 is counted live
    failed = finish(clock, RunStatus.FAILED, minutes_ago=60)  # 09:30
    finish(clock, RunStatus.SUCCEEDED, minutes_ago=75)  # 09:15
    finish(clock, RunStatus.SUCCEEDED, minutes_ago=10)  # 10:20, this hour
    first = day(clock)
    assert (first["failed"][-2], first["succeeded"][-2], first["started"][-2]) == (1, 1, 2)
    assert first["succeeded"][-1] == 1
    runs.retry(failed.pk)  # queued again: no longer a failure in the table...
    runs.purge("0s", [RunStatus.SUCCEEDED], now=clock.now())
    assert not JobRun.objects.filter(status__in=(RunStatus.FAILED, RunStatus.SUCCEEDED)).exists()
    again = day(clock)
    assert (again["failed"][-2], again["succeeded"][-2]) == (1, 1)  # ...but 09:00 keeps it
    assert again["succeeded"][-1] == 0  # the live hour counts what the table holds now


def test_each_hour_is_folded_once(clock: FakeClock, django_assert_num_queries: Any) -> None:
    clock.advance("10h30m")
    day(clock)  # the first page folds the whole day: the old cost, once
    with django_assert_num_queries(3):  # the rollup, and the live hour's two counts
        day(clock)
    clock.advance(HOUR)  # 11:30: 10:00 has ended
    finish(clock, RunStatus.FAILED, minutes_ago=45)  # 10:45
    with django_assert_num_queries(6):  # + the hour's two counts and the rollup's write
        counts = day(clock)
    assert counts["failed"][-2] == 1
    row = RunTally.objects.get(name=hours.NAME)
    assert len(row.tallies) == hours.HOURS  # the day, no older hour kept
    assert row.folded_until == hours.floor_hour(clock.now())


def test_an_hour_ends_for_the_rollup_after_the_fold_delay(clock: FakeClock) -> None:
    clock.advance("11h")
    finish(clock, RunStatus.SUCCEEDED, minutes_ago=0.5)  # 10:59:30
    clock.advance(counters.FOLD_DELAY / 2)  # 11:00:30: 10:00 is still counted live
    assert day(clock)["succeeded"][-2] == 1
    assert RunTally.objects.get(name=hours.NAME).folded_until < hours.floor_hour(clock.now())
    clock.advance(counters.FOLD_DELAY)
    assert day(clock)["succeeded"][-2] == 1  # folded now, counted once


def test_a_fold_behind_another_shows_the_other_ones_rollup(clock: FakeClock) -> None:
    clock.advance("10h30m")
    day(clock)
    stale = RunTally.objects.get(name=hours.NAME)
    finish(clock, RunStatus.FAILED, minutes_ago=15)  # 10:15
    clock.advance(HOUR)
    first = day(clock)  # another page folds 10:00 first
    moved = RunTally.objects.filter(pk=stale.pk, folded_until=stale.folded_until).update(tallies={})
    assert moved == 0  # the stale page's write would change nothing
    assert day(clock)["failed"] == first["failed"] and first["failed"][-2] == 1
