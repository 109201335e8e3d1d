"""The dashboard's charts and the hour's throughput from rollups (observe/rollups.py):
each minute and hour counted once it has ended, kept when its runs are retried or
purged, an hour summed from its minutes, folded by one reader when two load the page
at once, and only the last minute or two counted live."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from django_durable_jobs.engine.clock import FakeClock
from django_durable_jobs.models import JobRun, RunStatus, RunTally
from django_durable_jobs.observe import counters, rollups, stats
from django_durable_jobs.verbs import runs
from tests.factories import JobRunFactory

pytestmark = pytest.mark.django_db

HOUR = timedelta(hours=1)
MINUTE = timedelta(minutes=1)


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


def hour(clock: FakeClock) -> dict[str, list[int]]:
    return stats.series(clock.now(), step=MINUTE, buckets=60).counts


def test_ended_minutes_and_hours_are_counted_once_and_kept_through_retries_and_purges(
    clock: FakeClock,
) -> None:
    clock.advance("10h30m")  # 10:30: 09:00 and 10:00-10:28 have ended
    failed = finish(clock, RunStatus.FAILED, minutes_ago=60)  # 09:30
    finish(clock, RunStatus.SUCCEEDED, minutes_ago=75)  # 09:15
    finish(clock, RunStatus.SUCCEEDED, minutes_ago=10)  # 10:20
    finish(clock, RunStatus.SUCCEEDED, minutes_ago=0.25)  # 10:29:45, counted live
    first, minutes = day(clock), hour(clock)
    assert (first["failed"][-2], first["succeeded"][-2], first["started"][-2]) == (1, 1, 2)
    assert first["succeeded"][-1] == 2
    assert (minutes["succeeded"][-11], minutes["succeeded"][-2]) == (1, 1)
    runs.retry(failed.pk)  # queued again: no longer a failure in the table...
    runs.purge("0s", [RunStatus.SUCCEEDED], now=clock.now())
    assert not JobRun.objects.filter(status__in=(RunStatus.FAILED, RunStatus.SUCCEEDED)).exists()
    again, minutes = day(clock), hour(clock)
    assert (again["failed"][-2], again["succeeded"][-2]) == (1, 1)  # ...but 09:00 keeps it
    assert again["succeeded"][-1] == 1  # 10:20 kept by its minute; 10:29:45 was live
    assert (minutes["succeeded"][-11], minutes["succeeded"][-2]) == (1, 0)


def test_an_hour_is_summed_from_its_minutes_when_the_minute_rollup_holds_them(
    clock: FakeClock,
) -> None:
    clock.advance("10h30m")
    finish(clock, RunStatus.SUCCEEDED, minutes_ago=10)  # 10:20
    hour(clock)  # folds 10:20's minute
    runs.purge("0s", [RunStatus.SUCCEEDED], now=clock.now())
    clock.advance(HOUR)  # 11:30: 10:00 has ended; the table no longer has its run
    assert day(clock)["succeeded"][-2] == 1
    row = RunTally.objects.get(name=rollups.HOURS.name)
    assert row.tallies[rollups.floor(clock.now() - HOUR, HOUR).isoformat()]["succeeded"] == 1


def test_each_minute_and_hour_is_folded_once(
    clock: FakeClock, django_assert_num_queries: Any
) -> None:
    clock.advance("10h30m")
    day(clock)  # the first page folds the whole day and two hours of minutes, once
    with django_assert_num_queries(4):  # the two rollups, and the live minutes' two counts
        day(clock)
    clock.advance(HOUR)  # 11:30: 10:00 has ended, and 10:29-11:28
    finish(clock, RunStatus.FAILED, minutes_ago=45)  # 10:45
    # + the new minutes' three counts (starts, finishes, failures by error) and the
    # minute rollup's write, the hour rollup's write (the hour summed from its
    # minutes), and the minute rollup read again
    with django_assert_num_queries(10):
        counts = day(clock)
    assert counts["failed"][-2] == 1
    row = RunTally.objects.get(name=rollups.HOURS.name)
    assert len(row.tallies) == rollups.HOURS.kept  # the day, no older hour kept
    assert row.folded_until == rollups.floor(clock.now(), HOUR)
    minutes = RunTally.objects.get(name=rollups.MINUTES.name)
    assert len(minutes.tallies) == rollups.MINUTES.kept
    assert minutes.folded_until == rollups.floor(clock.now() - counters.FOLD_DELAY, MINUTE)


def test_a_minute_ends_for_the_rollup_after_the_fold_delay(clock: FakeClock) -> None:
    clock.advance("11h")
    ran = finish(clock, RunStatus.SUCCEEDED, minutes_ago=0.5)  # 10:59:30
    clock.advance(counters.FOLD_DELAY / 2)  # 11:00:30: 10:59 is still counted live
    assert day(clock)["succeeded"][-2] == 1
    assert hour(clock)["succeeded"][-2] == 1
    row = RunTally.objects.get(name=rollups.MINUTES.name)
    assert ran.finished_at is not None
    assert row.folded_until == rollups.floor(ran.finished_at, MINUTE)  # folded up to it
    clock.advance(counters.FOLD_DELAY)
    assert day(clock)["succeeded"][-2] == 1  # folded now, counted once
    assert hour(clock)["succeeded"][-3] == 1


def test_a_fold_behind_another_shows_the_other_ones_rollup(clock: FakeClock) -> None:
    clock.advance("10h30m")
    hour(clock)
    stale = RunTally.objects.get(name=rollups.MINUTES.name)
    finish(clock, RunStatus.FAILED, minutes_ago=0.5)  # 10:29:30
    clock.advance("2m")
    first = hour(clock)  # another page folds 10:29 first
    moved = RunTally.objects.filter(pk=stale.pk, folded_until=stale.folded_until).update(tallies={})
    assert moved == 0  # the stale page's write would change nothing
    assert hour(clock)["failed"] == first["failed"] and first["failed"][-4] == 1


def test_the_last_hours_throughput_is_exact_at_its_ends_and_kept_in_between(
    clock: FakeClock,
) -> None:
    clock.advance("10h30m15s")
    finish(clock, RunStatus.SUCCEEDED, minutes_ago=61)  # before the hour
    finish(clock, RunStatus.SUCCEEDED, minutes_ago=59.9)  # 09:30:21: the head, live
    retried = finish(clock, RunStatus.FAILED, minutes_ago=30)  # a folded minute
    finish(clock, RunStatus.CANCELLED, minutes_ago=0.2)  # the tail, live
    expected = {"started": 3, "succeeded": 1, "failed": 1, "cancelled": 1, "skipped": 0}
    assert stats.throughput(clock.now() - HOUR, rollups.read(clock.now())) == expected
    runs.retry(retried.pk)
    # The minute keeps its failure; the live ends count the table as it is.
    assert stats.throughput(clock.now() - HOUR, rollups.read(clock.now())) == expected
    minute = stats.throughput(clock.now() - MINUTE, rollups.read(clock.now()))
    assert minute == {**dict.fromkeys(rollups.KEYS, 0), "started": 1, "cancelled": 1}


def test_the_days_top_errors_keep_folded_failures_and_count_the_ends_live(
    clock: FakeClock,
) -> None:
    clock.advance("1d10h30m15s")
    day_ago = clock.now() - timedelta(days=1)

    def fail(minutes_ago: float, error_type: str, code: str = "") -> JobRun:
        run = finish(clock, RunStatus.FAILED, minutes_ago)
        JobRun.objects.filter(pk=run.pk).update(error_type=error_type, error_code=code)
        return run

    fail(24 * 60 + 1, "shop.errors.Old")  # before the day
    fail(24 * 60 - 1, "shop.errors.Declined")  # the day's first, partial hour: live
    retried = fail(5 * 60, "shop.errors.Declined")  # a folded hour
    fail(20, "builtins.TimeoutError", code="X_JOB_TIMEOUT")  # a folded minute
    fail(0.2, "shop.errors.Declined")  # the last minute: live
    folded = rollups.read(clock.now())
    expected = [("shop.errors.Declined", "", 3), ("X_JOB_TIMEOUT", "X_JOB_TIMEOUT", 1)]
    assert stats.top_errors(day_ago, folded) == expected
    runs.retry(retried.pk)  # no longer a failure in the table; its hour keeps it
    assert stats.top_errors(day_ago, rollups.read(clock.now())) == expected
