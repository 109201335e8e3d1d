"""The plan of PostgreSQL's claim (``db/postgresql/claims.py``, the statement of
``queries.sql`` ``claim``) when nothing of the worker's queue is due: behind many
parked runs of its queue and another queue's due backlog."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.db import connection

from django_durable_jobs.db.postgresql import claims
from django_durable_jobs.engine.clock import FakeClock
from django_durable_jobs.models import JobRun, RunStatus
from tests.factories import JobRunFactory
from tests.integration.db.postgresql.plans import nested_plans
from tests.testapp import jobs

pytestmark = [
    pytest.mark.postgres(reason="a plan of PostgreSQL's"),
    pytest.mark.psycopg3(reason="the one-statement claim is psycopg 3's"),
    pytest.mark.django_db(transaction=True),
]

PARKED = 5_000
BACKLOG = 500


def _claim_plans(clock: FakeClock, queues: list[str] | None, calls: int = 8) -> list[str]:
    """The plans of ``calls`` claims of ``queues`` (more than the five custom plans a
    prepared statement gets before PostgreSQL may keep a generic one)."""

    def claim() -> None:
        for _ in range(calls):
            claims.claim("default", "w-plan", clock.now(), timedelta(seconds=30), queues, 8)

    return [plan for plan in nested_plans(claim, buffers=True) if ") AS at" in plan]


def _part(plan: str, name: str) -> str:
    """The lines of ``plan`` under its subquery ``name`` (``queries.sql`` claim_picked)."""
    start = plan.index(f"Subquery Scan on {name} ")
    ends = [plan.find(f"Subquery Scan on {after} ", start) for after in ("below", "at")]
    return plan[start : min([end for end in ends if end > start] or [len(plan)])]


def _buffers(plan: str) -> int:
    """The pages ``plan`` (a plan, or a part of one) read: its first line of buffers."""
    found = re.search(r"Buffers: shared hit=(\d+)(?: read=(\d+))?", plan)
    assert found is not None, plan
    return int(found[1]) + int(found[2] or 0)


def test_an_idle_claim_stops_at_its_queues_first_parked_run(clock: FakeClock) -> None:
    """The claim's indexes keep a priority's parked runs after its due ones. Read as
    one range, a claim that found fewer due runs than it wanted read all of them: a
    claim of a worker with nothing due read every parked run of its queue (50 ms
    behind a million), at every poll and after every woken run; and, through the
    index of every queue, the other queues' due runs too, each read from the table."""
    later = clock.now() + timedelta(days=1)
    JobRun.objects.bulk_create(  # in turns, as a day's runs are written
        JobRunFactory.build(queue="other", wake_at=clock.now() - timedelta(milliseconds=n))
        if n % 10 == 0
        else JobRunFactory.build(
            queue="busy", status=RunStatus.SLEEPING, wake_at=later + timedelta(seconds=n)
        )
        for n in range(PARKED + BACKLOG)
    )
    clock.advance("1s")
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE django_durable_jobs_jobrun")
    plans = _claim_plans(clock, ["busy"])
    assert len(plans) == 8
    for plan in plans:
        # The runs at the default priority: a range of the due ones, the queue compared
        # in the index (either claim index has it: the planner takes the one of every
        # queue when it thinks this queue holds most runnable runs), never a row of
        # another queue's read from the table.
        at = _part(plan, "at")
        cond = re.search(r"Index Cond: (.*)", at)
        assert cond is not None and "(priority = 0)" in cond[1], plan
        # 'busy' in a custom plan, the parameter in a generic one
        assert re.search(r"\(queue\)::text = ('busy'::text|\(\$5\)\[1\])", cond[1]), plan
        assert "Rows Removed by Filter" not in plan, plan
        # A walk past the 5,000 parked runs reads 25 index pages and more (about 200
        # entries a page); through the index of every queue, the read of the due runs
        # passes the other queue's 500 due entries in the index (10 pages seen in CI's
        # suite with the connection options), none from the table.
        assert _buffers(at) < 20, plan
    runs = claims.claim("default", "w", clock.now(), timedelta(seconds=30), ["busy"], 8).runs
    assert runs == []
    woken = jobs.noop.using(queue="busy").enqueue()
    clock.advance("1s")
    runs = claims.claim("default", "w", clock.now(), timedelta(seconds=30), ["busy"], 8).runs
    assert [run.pk for run in runs] == [woken.pk]


def test_a_claim_of_every_queue_reads_due_runs_only(clock: FakeClock) -> None:
    """The same for a worker of every queue, through ``durable_run_runnable_all``: the
    due runs first, and no parked one read once enough were found."""
    later = clock.now() + timedelta(days=1)
    JobRun.objects.bulk_create(
        JobRunFactory.build(
            queue="busy", status=RunStatus.SLEEPING, wake_at=later + timedelta(seconds=n)
        )
        for n in range(PARKED)
    )
    clock.advance("1s")
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE django_durable_jobs_jobrun")
    plans = _claim_plans(clock, None)
    assert len(plans) == 8
    for plan in plans:
        assert "Rows Removed by Filter" not in plan, plan
        assert _buffers(_part(plan, "at")) < 10, plan
