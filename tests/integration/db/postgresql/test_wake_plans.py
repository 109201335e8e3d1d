"""The plan of the wake-up's read of the runs waiting for an event (``verbs/waking.py``
``waiters``) on PostgreSQL, behind many runs waiting for the same event with keys of
their own: the common shape (``wait_for_event("order.paid", match=user_id)``)."""

from __future__ import annotations

import re

import pytest
from django.db import connection

from django_durable_jobs.engine.vocabulary import StepStatus
from django_durable_jobs.models import JobRun, RunStatus, StepRecord
from django_durable_jobs.verbs.waking import waiters
from tests.factories import T0, EventFactory, JobRunFactory

pytestmark = [pytest.mark.postgres(reason="a plan of PostgreSQL's"), pytest.mark.django_db]

WAITING = 3000


def test_a_keyed_event_reads_its_keys_waits_and_the_keyless_ones_only() -> None:
    """Read as one condition (``key = k OR key IS NULL``), the waits were every wait
    for the event, this key's kept by a filter: 100-170 ms an event behind 500,000."""
    runs = JobRun.objects.bulk_create(
        JobRunFactory.build(status=RunStatus.WAITING) for _ in range(WAITING)
    )
    StepRecord.objects.bulk_create(
        StepRecord(
            run=run,
            name="wait",
            kind="wait",
            status=StepStatus.WAITING,
            event="order.paid",
            correlation_key=None if n == 0 else f"user-{n}",
            event_cursor=0,
            started_at=T0,
        )
        for n, run in enumerate(runs)
    )
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE django_durable_jobs_steprecord")
        cursor.execute("ANALYZE django_durable_jobs_jobrun")
    found = waiters(EventFactory.create(name="order.paid", key="user-7"))
    assert set(found.values_list("pk", flat=True)) == {runs[0].pk, runs[7].pk}
    # At 10 million runs the planner misjudged how many waits the event has and read
    # them with one index scan, the OR as its filter; without bitmap scans it does so
    # here, where 3,000 waits would otherwise take a BitmapOr of the two keys.
    with connection.cursor() as cursor:
        cursor.execute("SET enable_bitmapscan = off")
    try:
        plan = found.explain(analyze=True)
    finally:
        with connection.cursor() as cursor:
            cursor.execute("RESET enable_bitmapscan")
    removed = [int(n) for n in re.findall(r"Rows Removed by Filter: (\d+)", plan)]
    assert sum(removed) < 10, plan
    assert "Seq Scan on django_durable_jobs_steprecord" not in plan, plan
