"""The rows MariaDB's claim reads (``flow.limits``' look for runs under a limit, then
``orm_dialect.MySQL.pick``: both read through ``models.transitions.best``) while many
runs are due at once: a backlog of queued runs, or sleeping runs woken together."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import TypeVar

import pytest
from django.db import connection

from django_durable_jobs.db.claims import claim
from django_durable_jobs.engine.clock import FakeClock
from django_durable_jobs.models import JobRun, RunStatus
from tests.factories import JobRunFactory

pytestmark = [
    pytest.mark.mariadb(reason="the claim's shortlist of MariaDB and MySQL"),
    pytest.mark.django_db(transaction=True),
]

BACKLOG = 5_000
#: Index entries and rows a claim of 8 reads: a few per part of the shortlist, the
#: lock by primary key and the guarded UPDATE. A sort of the backlog reads all of it.
READS_AT_MOST = 500

_T = TypeVar("_T")


def _rows_read(action: Callable[[], _T]) -> tuple[_T, int]:
    """What ``action`` returns, and the index entries and rows this session's
    handlers read during it."""

    def reads() -> int:
        with connection.cursor() as cursor:
            cursor.execute("SHOW SESSION STATUS LIKE 'Handler_read%%'")
            return sum(int(value) for _, value in cursor.fetchall())

    before = reads()
    result = action()
    return result, reads() - before


@pytest.mark.parametrize(
    ("status", "priority"),
    [
        (RunStatus.QUEUED, 1),
        (RunStatus.QUEUED, 0),
        (RunStatus.QUEUED, -1),
        (RunStatus.SLEEPING, 0),
    ],
    ids=["queued above", "queued at", "queued below", "sleeping"],
)
@pytest.mark.parametrize(
    "queues", [None, ["default"], ["mail", "default"]], ids=["every queue", "one queue", "two"]
)
def test_a_claim_behind_a_backlog_reads_a_few_rows_not_the_backlog(
    clock: FakeClock, queues: list[str] | None, status: RunStatus, priority: int
) -> None:
    """Thousands of due runs (queued at a priority above, at or below the default, or
    sleeping runs all woken at once) beside finished runs, runs sleeping for days and
    a few due runs at the default priority. MariaDB's optimizer costs reading them in
    the claim's order and reading them through the wake time then sorting nearly
    alike; when it took the second, every claim read all of them (120 ms behind
    100,000 queued runs, 43 ms while 100,000 sleeping runs were due)."""
    due = clock.now() - timedelta(seconds=1)
    JobRun.objects.bulk_create(
        JobRunFactory.build(wake_at=due + timedelta(microseconds=n)) for n in range(5)
    )
    JobRun.objects.bulk_create(
        JobRunFactory.build(status=status, finished_at=due, wake_at=None)
        for status in (RunStatus.SUCCEEDED, RunStatus.FAILED)
        for _ in range(BACKLOG // 2)
    )
    JobRun.objects.bulk_create(
        JobRunFactory.build(status=RunStatus.SLEEPING, wake_at=due + timedelta(days=3))
        for _ in range(BACKLOG // 10)
    )
    oldest = due - timedelta(seconds=1)
    JobRun.objects.bulk_create(
        JobRunFactory.build(
            status=status, priority=priority, wake_at=oldest + timedelta(microseconds=n)
        )
        for n in range(BACKLOG)
    )
    runnable = JobRun.objects.runnable(clock.now(), queues)
    for _ in range(3):
        best = list(runnable.values_list("id", flat=True)[:8])
        claimed, read = _rows_read(lambda: _claim(clock, queues))
        assert [run.id for run in claimed] == best  # the claim's order
        assert read <= READS_AT_MOST, f"{read} rows read to claim 8"


def _claim(clock: FakeClock, queues: list[str] | None) -> list[JobRun]:
    return claim("w", now=clock.now(), lease=timedelta(minutes=1), queues=queues, limit=8)


@pytest.mark.parametrize("queues", [["default"], ["mail", "default"]], ids=["one", "two"])
def test_a_claim_of_its_queues_reads_past_no_backlog_of_another(
    clock: FakeClock, queues: list[str]
) -> None:
    """A worker of some queues while another queue holds a backlog: through the index
    of every queue, a claim of two queues read the other queue's due runs one by one
    before it found its own."""
    due = clock.now() - timedelta(seconds=1)
    JobRun.objects.bulk_create(
        JobRunFactory.build(queue="other", wake_at=due - timedelta(microseconds=n))
        for n in range(BACKLOG)
    )
    mine = JobRun.objects.bulk_create(
        JobRunFactory.build(queue=queue, wake_at=due + timedelta(microseconds=n))
        for n, queue in enumerate(queues * 4)
    )
    claimed, read = _rows_read(lambda: _claim(clock, queues))
    assert {run.id for run in claimed} == {run.id for run in mine}
    assert read <= READS_AT_MOST, f"{read} rows read to claim 8"
