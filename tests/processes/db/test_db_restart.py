"""PostgreSQL restarted under load: 500 five-step runs, 2 worker processes,
the server stopped (3 s down) and started twice during the load. Every run succeeds,
the workers stay up and resume within 10 s of the server coming back, and no step is
recorded twice.

Restarting a server is disruptive: this runs only under ``make faults`` and only
against the cluster named by ``DURABLE_JOBS_RESTART_CLUSTER`` ("<version> <name>", as
``pg_ctlcluster`` takes them), which must be the one DATABASE_URL points at, e.g.

    pg_createcluster 15 faults --port 5433 --start -- --auth-host=trust
    DURABLE_JOBS_RESTART_CLUSTER="15 faults" \\
    DATABASE_URL=postgres://postgres@127.0.0.1:5433/dj_j \\
    pytest -m faults tests/processes/db/test_db_restart.py
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Callable
from typing import TypeVar

import pytest
from django.db import DatabaseError, connection, transaction
from django.db.models import Count

from django_durable_jobs.models import JobRun, RunStatus, StepRecord
from tests.processes.worker.test_worker import Worker, Workers, wait_until, workers  # noqa: F401
from tests.testapp import fault_jobs

pytestmark = [
    pytest.mark.subprocess,
    pytest.mark.faults,
    pytest.mark.postgres(reason="restarts a PostgreSQL server"),
    pytest.mark.django_db(transaction=True),
]

RUNS = 500
CLUSTER = os.environ.get("DURABLE_JOBS_RESTART_CLUSTER", "")
T = TypeVar("T")


def _cluster(action: str) -> None:
    version, name = CLUSTER.split()
    command = ["pg_ctlcluster", "--skip-systemctl-redirect", version, name, action]
    subprocess.run([*command, *(["-m", "fast"] if action == "stop" else [])], check=True)


def _ask(query: Callable[[], T], default: T) -> T:
    """A read from the test itself, which loses its connection too."""
    try:
        return query()
    except DatabaseError:
        connection.close()
        return default


def _succeeded() -> int:
    return _ask(lambda: JobRun.objects.filter(status=RunStatus.SUCCEEDED).count(), -1)


def _at_least(share: int) -> Callable[[], bool]:
    return lambda: _succeeded() >= share


def _restart(pool: list[Worker]) -> float:
    """Stop the server, keep it down 3 s, start it; seconds until a run succeeds again."""
    _cluster("stop")
    time.sleep(3)  # the outage itself, not a wait for a condition
    before = _ask(lambda: JobRun.objects.filter(status=RunStatus.SUCCEEDED).count(), -1)
    _cluster("start")
    started = time.monotonic()
    if before < 0:  # the count above ran while the server was down: take it now
        before = wait_until(lambda: _succeeded() + 1, timeout=30, what="a connection") - 1
    wait_until(
        lambda: _succeeded() > before or _succeeded() == RUNS,
        timeout=60,
        what="the workers to resume after the restart",
        workers=pool,
    )
    return time.monotonic() - started


@pytest.mark.skipif(not CLUSTER, reason="set DURABLE_JOBS_RESTART_CLUSTER (make faults)")
def test_a_database_restarted_twice_under_load_loses_nothing(workers: Workers) -> None:  # noqa: F811
    with transaction.atomic():
        runs = [fault_jobs.five.using(queue="default").enqueue(n) for n in range(RUNS)]
    pool = [workers.start("w1"), workers.start("w2")]
    for worker in pool:
        workers.wait_started(worker)
    began = time.monotonic()
    resumed = []
    for share in (RUNS // 5, RUNS // 2):
        wait_until(
            _at_least(share),
            timeout=300,
            what=f"{share} runs",
            workers=pool,
        )
        resumed.append(_restart(pool))
    wait_until(lambda: _succeeded() >= RUNS, timeout=600, what="every run", workers=pool)
    elapsed = time.monotonic() - began
    statuses = dict(JobRun.objects.values_list("status").annotate(n=Count("id")))
    records = StepRecord.objects.filter(run__in=runs).count()
    attempts = sorted(JobRun.objects.values_list("attempt", flat=True))
    print(
        f"\n[restart / postgresql] runs={RUNS} statuses={statuses} step records={records} "
        f"resumed after restart in {', '.join(f'{s:.1f}s' for s in resumed)} "
        f"max attempt={attempts[-1]} elapsed={elapsed:.1f}s"
    )
    assert statuses == {RunStatus.SUCCEEDED: RUNS}
    assert records == RUNS * 5  # one record per step: none twice (and none missing)
    assert all(seconds < 10 for seconds in resumed), resumed
    assert all(worker.alive() for worker in pool)
    for worker in pool:
        assert worker.terminate() == 0
