"""The plans of the statements inside PostgreSQL's limited claim (migrations 0014,
0016): read with auto_explain, whose nested-statement plans come back as notices."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

import pytest
from django.db import connection

from django_durable_jobs.db import dialect
from django_durable_jobs.engine.clock import FakeClock
from tests.testapp import flow_jobs

pytestmark = pytest.mark.postgres(reason="the PL/pgSQL claim of runs under a limit")

KEYS = 300


def _nested_plans(call: Any) -> list[str]:
    """Run ``call()`` with auto_explain on for this connection; the plans of every
    statement it ran, nested ones included."""
    plans: list[str] = []
    connection.ensure_connection()
    raw = connection.connection
    assert raw is not None

    def keep(diagnostic: Any) -> None:
        plans.append(str(diagnostic.message_primary))

    raw.add_notice_handler(keep)
    with connection.cursor() as cursor:
        cursor.execute("LOAD 'auto_explain'")
        for setting in (
            "auto_explain.log_min_duration = 0",
            "auto_explain.log_nested_statements = on",
            "auto_explain.log_analyze = on",
            "auto_explain.log_level = notice",
        ):
            cursor.execute(f"SET {setting}")
    try:
        call()
    finally:
        raw.remove_notice_handler(keep)
        connection.close()  # auto_explain stays loaded in this session: start afresh
    return plans


@pytest.mark.django_db(transaction=True)
def test_the_limited_claim_finds_a_keys_best_run_through_the_key_index(clock: FakeClock) -> None:
    """Before 0016 the key was compared with IS NOT DISTINCT FROM, which no index
    serves: the best run of a key was found by reading every runnable limited run of
    the job (the flow benchmark's limited claim slowed down as its backlog grew)."""
    for n in range(KEYS):
        flow_jobs.one_per_key.enqueue(f"k{n}")
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE django_durable_jobs_jobrun")
    clock.advance("1s")
    chosen = dialect.of("default")
    assert isinstance(chosen, dialect.Postgres)
    claimed: list[Any] = []

    def claim() -> None:
        runs, _ = chosen.claim_limited_finishing(
            "w-plans", clock.now(), timedelta(seconds=30), None, 1, clock, None
        )
        claimed.extend(runs)

    plans = _nested_plans(claim)
    assert len(claimed) == 1
    best = [plan for plan in plans if "SKIP LOCKED" in plan and "concurrency_key" in plan]
    assert best, plans
    for plan in best:
        index_conditions = [line for line in plan.splitlines() if "Index Cond" in line]
        assert any("concurrency_key" in line for line in index_conditions), plan
        removed = [int(n) for n in re.findall(r"Rows Removed by Filter: (\d+)", plan)]
        assert sum(removed) < 10, plan  # not the other keys' runs
