"""A worker on psycopg2 (Django's other PostgreSQL driver): the ORM's claims, flow
control and polling instead of psycopg 3's one-statement path and LISTEN/NOTIFY.

The worker process cannot import psycopg 3 (``scripts/psycopg2_only``, whose ``psycopg``
module refuses to load, comes first on its path), so Django picks psycopg2, as in a
project that has only psycopg2 installed. Its claims of runs under a concurrency limit
went to psycopg 3's PL/pgSQL path and failed (``No module named 'psycopg'``) on every
claim.
"""

from __future__ import annotations

import os

import pytest
from django.db import transaction

from django_durable_jobs.models import FINISHED, JobRun, RunStatus
from tests.processes.worker.test_lane import run_statuses, workers  # noqa: F401
from tests.processes.worker.test_worker import REPO_DIR, Workers, wait_until
from tests.testapp import flow_jobs, jobs

pytestmark = [
    pytest.mark.subprocess,
    pytest.mark.django_db(transaction=True),
    pytest.mark.postgres(reason="psycopg2 is a PostgreSQL driver"),
]


def test_a_worker_on_psycopg2_runs_limited_and_plain_runs(
    workers: Workers,  # noqa: F811
) -> None:
    pytest.importorskip("psycopg2")
    hidden = str(REPO_DIR / "scripts" / "psycopg2_only")
    path = os.pathsep.join(p for p in (hidden, os.environ.get("PYTHONPATH", "")) if p)
    with transaction.atomic():
        limited = [flow_jobs.one_per_key.enqueue(f"k{n % 3}") for n in range(9)]
        plain = [jobs.three_steps.enqueue(user_id=n) for n in range(5)]
    worker = workers.start("psycopg2", env={"PYTHONPATH": path})
    wait_until(
        lambda: not JobRun.objects.exclude(status__in=FINISHED).exists(),
        timeout=120,  # only keeps a broken worker from hanging the suite
        what="the runs to finish on psycopg2",
        workers=[worker],
        detail=run_statuses,
    )
    assert worker.terminate() == 0
    statuses = set(JobRun.objects.values_list("status", flat=True))
    assert statuses == {RunStatus.SUCCEEDED}, run_statuses()
    assert JobRun.objects.count() == len(limited) + len(plain)
    log = worker.log()
    assert "database=postgresql wake=polling" in log, log  # psycopg2: no LISTEN
