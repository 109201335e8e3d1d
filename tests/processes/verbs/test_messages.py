"""Results and messages with real worker processes: messages sent to runs two workers
park in ``receive`` wake them before the event poll, each received once and in order;
the caller's ``run.wait()`` returns their results across processes."""

from __future__ import annotations

import pytest
from django.db import connections, transaction

from django_durable_jobs import send
from django_durable_jobs.db.postgresql import finished
from django_durable_jobs.models import JobRun, Message, RunStatus
from tests.processes.worker.test_worker import Workers, wait_until, workers  # noqa: F401
from tests.testapp.message_jobs import inbox

pytestmark = [pytest.mark.subprocess, pytest.mark.django_db(transaction=True)]


def test_sent_messages_wake_their_runs_and_wait_returns_each_result(
    workers: Workers,  # noqa: F811
) -> None:
    runs = [inbox.enqueue(2) for _ in range(20)]
    pool = [workers.start("a"), workers.start("b")]
    for worker in pool:
        workers.wait_started(worker)
    wait_until(
        lambda: JobRun.objects.filter(status=RunStatus.WAITING).count() == 20,
        timeout=60,
        what="20 runs to wait in receive",
        workers=pool,
    )
    with transaction.atomic():
        for number, run in enumerate(reversed(runs)):  # sent in another order than enqueued
            send(run.id, "item", [number, "first"])
            send(run.id, "item", [number, "second"])
    try:
        # The event poll is 30 s: within it, the messages' commits woke the runs.
        results = [run.wait(timeout="20s") for run in runs]
    finally:
        finished.stop_all()
        connections.close_all()
    for number, result in enumerate(reversed(results)):
        assert result == [[number, "first"], [number, "second"]]
    assert not Message.objects.filter(received_at__isnull=True).exists()
    assert sorted(set(Message.objects.values_list("step", flat=True))) == ["take0", "take1"]
