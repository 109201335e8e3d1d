"""Events with real worker processes: 100 waiting runs, 100 keys, 2 workers."""

from __future__ import annotations

import threading
import time

import pytest
from django.db import connections, transaction

from django_durable_jobs import publish_event
from django_durable_jobs.models import JobRun, RunStatus
from tests.processes.worker.test_lane import run_statuses
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
        detail=run_statuses,
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
        detail=run_statuses,
    )
    results = dict(JobRun.objects.values_list("id", "result"))
    assert all(results[run.pk] == {"key": key} for key, run in runs.items())


def test_an_idle_worker_is_woken_by_an_enqueue_and_a_publish_not_by_its_poll(
    workers: Workers,  # noqa: F811
) -> None:
    """With a 30 s poll, a run enqueued to an idle worker starts and a publish resumes
    it within seconds: LISTEN on PostgreSQL, the doorbell on MariaDB, ``PRAGMA
    data_version`` on SQLite. The deadlines are a behaviour check (woken, not polled),
    not a speed measure."""
    worker = workers.start("idle", "--poll-interval", "30s")
    workers.wait_started(worker)
    wait_until(lambda: " wake=" in worker.log(), timeout=10, what="the banner", workers=[worker])
    time.sleep(0.5)  # its first, empty claim is behind it: it waits now
    run = waiter.enqueue("k")
    wait_until(
        lambda: JobRun.objects.get(pk=run.pk).status == RunStatus.WAITING,
        timeout=10,
        what="the enqueued run to start and wait",
        workers=[worker],
    )
    time.sleep(0.5)  # the worker is idle again
    with transaction.atomic():
        publish_event("keyed", {"key": "k"}, key="k")
    wait_until(
        lambda: JobRun.objects.get(pk=run.pk).status == RunStatus.SUCCEEDED,
        timeout=10,
        what="the published event to resume the run",
        workers=[worker],
    )
    assert JobRun.objects.get(pk=run.pk).result == {"key": "k"}


@pytest.mark.postgres(reason="the publisher leaves the pass after its commit to the workers")
@pytest.mark.mariadb(
    reason="SQLite: the run cannot be enqueued, nor park, while the publisher holds the "
    "write lock (tests/integration/verbs/test_event_late_pass.py has SQLite's race)"
)
def test_a_run_that_parks_while_the_publisher_is_open_is_woken_by_the_worker_that_hears_it(
    workers: Workers,  # noqa: F811
) -> None:
    """The publisher's transaction wakes no one (the run is not waiting yet); the run
    parks, and re-checks, before the event commits. The worker that hears of the event
    (LISTEN; the doorbell the publisher rings after its commit) wakes it, well before
    its 30 s poll and the run's 30 s re-check."""
    worker = workers.start("idle", "--poll-interval", "30s")
    workers.wait_started(worker)
    published, commit = threading.Event(), threading.Event()

    def publisher() -> None:
        try:
            with transaction.atomic():
                publish_event("keyed", {"key": "k"}, key="k")
                published.set()
                commit.wait(30)
        finally:
            connections.close_all()

    thread = threading.Thread(target=publisher)
    thread.start()
    try:
        assert published.wait(30)
        run = waiter.enqueue("k")
        wait_until(
            lambda: JobRun.objects.get(pk=run.pk).status == RunStatus.WAITING,
            timeout=10,
            what="the run to park while the publisher is open",
            workers=[worker],
        )
    finally:
        commit.set()
        thread.join(30)
    wait_until(
        lambda: JobRun.objects.get(pk=run.pk).status == RunStatus.SUCCEEDED,
        timeout=10,
        what="the worker that heard of the event to wake the run",
        workers=[worker],
    )
