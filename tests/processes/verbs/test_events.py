"""Events with real worker processes: 100 waiting runs, 100 keys, 2 workers."""

from __future__ import annotations

import pytest
from django.db import transaction

from django_durable_jobs import publish_event
from django_durable_jobs.models import JobRun, RunStatus
from tests.processes.worker.test_worker import Workers, wait_until, workers  # noqa: F401
from tests.testapp.event_jobs import waiter

pytestmark = [pytest.mark.subprocess, pytest.mark.django_db(transaction=True)]


def test_every_waiting_run_gets_its_own_event(workers: Workers) -> None:  # noqa: F811
    runs = {f"k{i}": waiter.enqueue(f"k{i}") for i in range(100)}
    pool = [workers.start("a"), workers.start("b")]
    for worker in pool:
        workers.wait_started(worker)
    wait_until(
        lambda: JobRun.objects.filter(status=RunStatus.WAITING).count() == 100,
        timeout=60,
        what="100 runs to wait",
        workers=pool,
    )
    with transaction.atomic():
        for key in reversed(runs):  # publish order differs from enqueue order
            publish_event("keyed", {"key": key}, key=key)
    # The event poll is 30 s: finishing well inside it means the events woke the runs.
    wait_until(
        lambda: JobRun.objects.filter(status=RunStatus.SUCCEEDED).count() == 100,
        timeout=20,
        what="100 runs to receive their events",
        workers=pool,
    )
    results = dict(JobRun.objects.values_list("id", "result"))
    assert all(results[run.pk] == {"key": key} for key, run in runs.items())
