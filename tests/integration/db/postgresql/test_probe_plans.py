"""The plan of an idle worker's look for a due run (``probe.any_due``: where workers
poll, psycopg 2 on PostgreSQL among them) behind many parked runs of its queue and
another queue's backlog."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection

from django_durable_jobs.db import probe
from django_durable_jobs.engine.clock import FakeClock
from django_durable_jobs.models import JobRun, RunStatus
from tests.factories import JobRunFactory
from tests.testapp import jobs

pytestmark = [pytest.mark.postgres(reason="a plan of PostgreSQL's"), pytest.mark.django_db]

PARKED = 3000
BACKLOG = 2000


def test_an_idle_workers_look_for_a_due_run_reads_a_claim_index_not_the_table(
    clock: FakeClock,
) -> None:
    """Unordered, the look expected a due run among the first rows of the table (its
    statistics: most runnable runs are on the worker's queue) and read the whole
    table when none was due: 400 ms at 2 million runs. In the claim's order it reads
    one of the claim's indexes, as the claim does."""
    later = clock.now() + timedelta(days=30)
    JobRun.objects.bulk_create(  # in turns, as a day's runs are written
        JobRunFactory.build(queue="busy", status=RunStatus.SLEEPING, wake_at=later)
        if n % 2 or n >= 2 * BACKLOG
        else JobRunFactory.build(queue="other", wake_at=clock.now())
        for n in range(PARKED + BACKLOG)
    )
    clock.advance("1s")
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE django_durable_jobs_jobrun")
    bound = probe.statement("default", clock.now(), ["busy"])
    assert bound is not None
    sql, params = bound
    with connection.cursor() as cursor:
        cursor.execute(f"EXPLAIN (ANALYZE, COSTS OFF) {sql}", params)
        plan = "\n".join(row[0] for row in cursor.fetchall())
    assert "Seq Scan" not in plan, plan
    assert "Index Scan using durable_run_runnable" in plan, plan
    assert not probe.any_due("default", clock.now(), ["busy"])
    jobs.noop.using(queue="busy").enqueue()
    clock.advance("1s")
    assert probe.any_due("default", clock.now(), ["busy"])
