"""A pause with real ``runjobs`` processes: made while two workers poll, it is honoured
by both, and by a worker restarted meanwhile; resumed, the queue drains."""

from __future__ import annotations

from collections import Counter

import pytest

from django_durable_jobs.models import JobRun, RunStatus
from django_durable_jobs.verbs import pauses
from tests.processes.worker.test_worker import Workers, wait_until, workers  # noqa: F401
from tests.testapp import jobs

pytestmark = [pytest.mark.subprocess, pytest.mark.django_db(transaction=True)]

SEEN = "pause seen: queue=default (smoke test; by ops)"
ENDED = "pause ended: queue=default"


def statuses() -> Counter[str]:
    return Counter(JobRun.objects.values_list("status", flat=True))


def test_a_pause_holds_across_workers_and_a_restart_until_resumed(
    workers: Workers,  # noqa: F811
) -> None:
    first, second = workers.start("first"), workers.start("second")
    workers.wait_started(first)
    workers.wait_started(second)
    pauses.pause("queue", "default", reason="smoke test", by="ops")
    seen_by_both = lambda: SEEN in first.log() and SEEN in second.log()  # noqa: E731
    wait_until(seen_by_both, timeout=30, what="the pause seen", workers=[first, second])
    for _ in range(6):
        jobs.noop.enqueue()
    assert first.terminate() == 0  # its restart reads the pause before its first claim
    again = workers.start("again")
    wait_until(lambda: SEEN in again.log(), timeout=30, what="the pause seen", workers=[again])
    # The second worker polled all the while (every 0.1 s): nothing was claimed.
    assert statuses() == Counter({RunStatus.QUEUED: 6})
    assert pauses.resume("queue", "default")
    wait_until(
        lambda: statuses() == Counter({RunStatus.SUCCEEDED: 6}),
        timeout=30,
        what="the queue to drain",
        workers=[second, again],
        detail=lambda: str(statuses()),
    )
    # Both see the resume within a poll, whether or not a run was left to claim.
    ended_for_both = lambda: ENDED in second.log() and ENDED in again.log()  # noqa: E731
    wait_until(ended_for_both, timeout=30, what="the resume seen", workers=[second, again])
    assert second.terminate() == 0 and again.terminate() == 0
