"""The plans of the statements inside PostgreSQL's limited claim
(``durable_claim_concurrency`` in db/postgresql/sql/schema.sql): read with auto_explain,
whose nested-statement plans come back as notices."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

import pytest
from django.db import connection

from django_durable_jobs.db import dialect
from django_durable_jobs.db.flow import limits as flow
from django_durable_jobs.db.postgresql import claims as postgres
from django_durable_jobs.db.postgresql import flow as postgres_flow
from django_durable_jobs.engine.clock import FakeClock
from django_durable_jobs.models import JobRun
from tests.integration.db.postgresql.plans import nested_plans
from tests.testapp import flow_jobs, jobs

pytestmark = pytest.mark.postgres(reason="the PL/pgSQL claim of runs under a limit")

KEYS = 300


#: How a key's runs are compared in the functions' statements (schema.sql).
_BY_KEY = re.compile(r"r\.concurrency_key (= \w+\.concurrency_key|IS NULL)")


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("cache_mode", ["auto", "force_generic_plan"])
@pytest.mark.psycopg3(reason="the PL/pgSQL flow claim is psycopg 3's")
def test_every_statement_on_one_key_reads_it_through_an_index(
    clock: FakeClock, cache_mode: str
) -> None:
    """PL/pgSQL caches a generic plan of each statement after a few calls. When the
    functions compared a key as ``= key OR (key IS NULL AND column IS NULL)``, the
    generic plan read every limited run of the job to count one key's slots
    (``Rows Removed by Filter: 10000`` behind the flow benchmark's 10,000 keys)."""
    for n in range(KEYS):  # two runs a key: the second is held while the first runs
        flow_jobs.one_per_key.enqueue(f"k{n}")
        flow_jobs.one_per_key.enqueue(f"k{n}")
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE django_durable_jobs_jobrun")
    clock.advance("1s")
    chosen = dialect.of("default")
    assert isinstance(chosen, dialect.Psycopg)
    claimed: list[Any] = []
    recorded: list[Any] = []

    def claim_then_finish() -> None:
        with connection.cursor() as cursor:
            cursor.execute(f"SET plan_cache_mode = {cache_mode}")
        for _ in range(8):  # more calls than the five PL/pgSQL plans for each call
            runs, _ = flow.claim_limited(
                "w-plans", now=clock.now(), lease=timedelta(seconds=30), limit=4, clock=clock
            )
            claimed.extend(runs)
        finishes = [
            postgres.Finish(
                run.pk,
                "w-plans",
                {**_values(run), "status": "succeeded"},
                run.job_name,
                run.concurrency_key,
            )
            for run in claimed
        ]
        recorded.extend(postgres_flow.finish_concurrency("default", finishes, clock.now()))

    plans = nested_plans(claim_then_finish)
    assert len(claimed) == 32 and len({run.concurrency_key for run in claimed}) == 32
    assert set(recorded) == {run.pk for run in claimed}
    held = JobRun.objects.filter(wake_at__isnull=True, status="queued").count()
    assert held == 0  # each finish let its key's held run go
    on_one_key = [plan for plan in plans if _BY_KEY.search(plan)]
    kinds = {_BY_KEY.search(plan)[0] for plan in on_one_key}  # type: ignore[index]
    assert kinds == {
        "r.concurrency_key = cand.concurrency_key",
        "r.concurrency_key = done_run.concurrency_key",
    }
    assert len(on_one_key) >= 32 * 3, len(on_one_key)  # best run, slots, hold; next held
    for plan in on_one_key:
        # Through an index: the key's, or for its slots that of the running runs
        # (the planner may take it while few runs are running: at most the 32 this
        # test claimed), never through the backlog of the other keys' 600 runs.
        assert "Index Cond" in plan, plan
        removed = [int(n) for n in re.findall(r"Rows Removed by Filter: (\d+)", plan)]
        assert sum(removed) < len(claimed) + 5, plan


def _values(run: JobRun) -> dict[str, Any]:
    return {name: getattr(run, name) for name in postgres.OUTCOME_COLUMNS}


@pytest.mark.django_db(transaction=True)
@pytest.mark.psycopg3(reason="the PL/pgSQL flow claim is psycopg 3's")
def test_a_worker_of_one_queue_finds_its_candidates_without_reading_its_backlog(
    clock: FakeClock,
) -> None:
    """The limited claim's candidates of one queue come from ``durable_run_runnable``
    in the claim's order. With ``queue = ANY (p_queues)`` a claim read every due run of
    the queue and sorted them, or walked past other queues' runs (here 2,000): 65 ms a
    claim behind 100,000 queued runs, in every worker whose jobs include one under a
    limit."""
    jobs.noop.using(queue="other").enqueue_many([()] * 2000)  # due first, not ours
    clock.advance("1s")
    jobs.noop.using(queue="busy").enqueue_many([()] * 100)
    flow_jobs.one_per_key.using(queue="busy").enqueue("k")
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE django_durable_jobs_jobrun")
    clock.advance("1s")

    def claims() -> None:
        for _ in range(8):  # more calls than the five PL/pgSQL plans for each call
            flow.claim_limited(
                "w-queue", now=clock.now(), lease=timedelta(seconds=30), queues=["busy"]
            )

    plans = [plan for plan in nested_plans(claims) if ") AS above" in plan]
    assert len(plans) == 8
    for plan in plans:
        # Neither sorted nor walked past the other queue's runs: the first due run of
        # "busy" is the first entry read.
        assert "Sort" not in plan, plan
        assert "Rows Removed by Filter" not in plan, plan
