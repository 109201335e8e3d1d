"""What differs per database and must not show: exact names and keys, the claim's indexes.

MariaDB's and MySQL's usual collations compare case-insensitively and ignore trailing
spaces; these tests fail there unless names and keys compare exactly. They pass on
PostgreSQL and SQLite too, which is the point: one behaviour everywhere.
"""

from __future__ import annotations

import threading
from datetime import timedelta
from typing import Any

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

from django_durable_jobs import job, publish_event
from django_durable_jobs.db.claims import claim, renew
from django_durable_jobs.db.flow import limits as flow
from django_durable_jobs.db.orm_dialect import SHORTLIST_SPARE
from django_durable_jobs.db.schema import PartialIndex
from django_durable_jobs.engine.clock import FakeClock
from django_durable_jobs.models import JobRun, RunStatus, StepRecord
from tests.conftest import Driver
from tests.testapp import jobs

LEASE = timedelta(minutes=1)
#: Three names that are one under utf8mb4_general_ci / utf8mb4_unicode_ci.
ALIKE = ("Load", "load", "load ")


@job(name="tests.alike_steps")
def alike_steps(ctx: Any) -> list[str]:
    return [ctx.step.run(name, jobs.effect, name, ctx.run_id) for name in ALIKE]


@job(name="tests.alike_wait")
def alike_wait(ctx: Any, key: str) -> Any:
    return ctx.step.wait_for_event("wait", "Order.Paid", match=key, timeout="1h")


@job(name="tests.Add")
def add_capitalised(ctx: Any, a: int, b: int) -> int:
    return a + b


@pytest.mark.django_db
def test_step_names_differing_in_case_or_trailing_space_are_different_steps(
    driver: Driver,
) -> None:
    run = alike_steps.enqueue()
    driver.step(run)
    run.refresh_from_db()
    assert run.status == RunStatus.SUCCEEDED and run.result == list(ALIKE)
    assert dict.fromkeys(ALIKE, 1) == jobs.CALLS  # none taken for a replay of another
    names = StepRecord.objects.filter(run=run).values_list("name", flat=True)
    assert sorted(names) == sorted(ALIKE)
    assert StepRecord.objects.get(run=run, name="load").output == "load"


@pytest.mark.django_db
def test_idempotency_keys_differing_in_case_or_trailing_space_are_different_runs() -> None:
    runs = {key: jobs.add.using(idempotency_key=key).enqueue(1, 2).pk for key in ALIKE}
    assert len(set(runs.values())) == 3
    assert jobs.add.using(idempotency_key="load").enqueue(1, 2).pk == runs["load"]
    assert JobRun.objects.get(idempotency_key="load ").pk == runs["load "]


@pytest.mark.django_db
def test_job_names_differing_in_case_keep_their_own_idempotency_keys() -> None:
    lower = jobs.add.using(idempotency_key="k").enqueue(1, 2)
    upper = add_capitalised.using(idempotency_key="k").enqueue(1, 2)
    assert upper.pk != lower.pk and upper.job_name == "tests.Add"
    assert JobRun.objects.filter(job_name="tests.add").count() == 1


@pytest.mark.django_db
def test_event_names_and_keys_match_exactly(
    driver: Driver, django_capture_on_commit_callbacks: Any
) -> None:
    run = alike_wait.enqueue("a")
    driver.step(run)
    with django_capture_on_commit_callbacks(execute=True):  # waiters are woken on commit
        publish_event("order.paid", {"n": 1}, key="a")  # the name differs in case
        publish_event("Order.Paid", {"n": 2}, key="A")
        publish_event("Order.Paid", {"n": 3}, key="a ")
    driver.drain()
    run.refresh_from_db()
    assert run.status == RunStatus.WAITING
    with django_capture_on_commit_callbacks(execute=True):
        publish_event("Order.Paid", {"n": 4}, key="a")
    driver.drain()
    run.refresh_from_db()
    assert run.status == RunStatus.SUCCEEDED and run.result == {"n": 4}


@pytest.mark.django_db
def test_queue_names_and_lease_owners_match_exactly(clock: FakeClock) -> None:
    run = jobs.noop.using(queue="mail").enqueue()
    assert claim("w", now=clock.now(), lease=LEASE, queues=["Mail", "mail "]) == []
    [claimed] = claim("Worker-1", now=clock.now(), lease=LEASE, queues=["mail"])
    assert claimed.pk == run.pk
    for other in ("worker-1", "Worker-1 "):
        assert renew(other, [run.pk], now=clock.now(), lease=LEASE) == 0
    assert renew("Worker-1", [run.pk], now=clock.now(), lease=LEASE) == 1


# -- indexes -------------------------------------------------------------------------

PARTIAL = {
    JobRun: ("durable_run_runnable", "durable_run_runnable_all", "durable_run_lease"),
    StepRecord: ("durable_step_waiting", "durable_step_event_done"),
}


def index_definition(name: str) -> str:
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute("SELECT indexdef FROM pg_indexes WHERE indexname = %s", [name])
        else:
            cursor.execute("SELECT sql FROM sqlite_master WHERE name = %s", [name])
        return str(cursor.fetchone()[0])


@pytest.mark.django_db
@pytest.mark.parametrize("model", list(PARTIAL), ids=lambda model: model.__name__)
def test_partial_indexes_exist_on_every_database(model: type[JobRun | StepRecord]) -> None:
    with connection.cursor() as cursor:
        indexes = connection.introspection.get_constraints(cursor, model._meta.db_table)
    for name in PARTIAL[model]:
        if connection.features.supports_partial_indexes:
            assert " WHERE " in index_definition(name), name
        else:  # MariaDB, MySQL: led by the status the condition tests
            declared = next(index for index in model._meta.indexes if index.name == name)
            assert isinstance(declared, PartialIndex)
            assert indexes[name]["columns"] == ["status", *declared.elsewhere[1:]], name


@pytest.mark.django_db
def test_the_reap_reads_only_the_cancelled_runs_that_hold_a_lease(clock: FakeClock) -> None:
    """The reap looks for runs cancelled in the hand of a worker that died
    (``claims.let_go_expired_cancelled``) through ``durable_run_lease``: never through
    the cancelled runs that hold no lease, however many there are."""
    now = clock.now()
    let_go = [
        JobRun(job_name="tests.noop", status=RunStatus.CANCELLED, created_at=now, finished_at=now)
        for _ in range(1000)
    ]
    JobRun.objects.bulk_create(let_go, batch_size=500)
    query = JobRun.objects.expired_leases(now, RunStatus.CANCELLED).values("id")[:100]
    sql, params = query.query.sql_with_params()
    verb = "EXPLAIN QUERY PLAN" if connection.vendor == "sqlite" else "EXPLAIN"
    with connection.cursor() as cursor:
        if connection.vendor != "mysql":  # MariaDB's ANALYZE TABLE would commit
            cursor.execute(f"ANALYZE {connection.ops.quote_name(JobRun._meta.db_table)}")
        cursor.execute(f"{verb} {sql}", params)
        plan = " ".join(str(value) for row in cursor.fetchall() for value in row)
    assert "durable_run_lease" in plan, plan


def explain(sql: str, verb: str = "EXPLAIN") -> list[dict[str, Any]]:
    with connection.cursor() as cursor:
        cursor.execute(f"{verb} {sql}")
        columns = [column[0] for column in cursor.description]
        return [dict(zip(columns, row, strict=True)) for row in cursor.fetchall()]


#: The indexes a claim on MariaDB may read runnable runs through: by status and wake
#: time (models), queued runs under no limit by priority (migration 0002: MariaDB
#: and MySQL only).
CLAIM_INDEXES = (
    "durable_run_runnable",
    "durable_run_runnable_all",
    "durable_run_unlimited_order",
    "durable_run_unlimited_order_all",
)


def shortlist_and_lock(queues: list[str] | None, now: Any) -> tuple[str, str]:
    """The claim's two statements for runs under no limit, captured from a claim."""
    with CaptureQueriesContext(connection) as queries:
        assert len(claim("w", now=now, lease=LEASE, queues=queues)) == 1
    # flow.claim_limited looks first (the test app has limited jobs); then the claim of
    # runs under no limit shortlists (one read per runnable status, merged) and locks.
    selects = [q["sql"] for q in queries if q["sql"].lstrip("(").startswith("SELECT")]
    first = next(i for i, sql in enumerate(selects) if "`throttle_limit` IS NULL" in sql)
    shortlist, lock = selects[first : first + 2]
    return shortlist, lock


@pytest.mark.mariadb(reason="the plan of the claim's statements on MariaDB")
@pytest.mark.django_db
@pytest.mark.parametrize("queues", [None, ["mail"]], ids=["all-queues", "one-queue"])
def test_the_claim_reads_runnable_runs_through_an_index(
    clock: FakeClock, queues: list[str] | None
) -> None:
    now = clock.now()
    finished = [
        JobRun(job_name="tests.noop", queue=queue, status=status, created_at=now, finished_at=now)
        for queue in ("default", "mail")
        for status in (RunStatus.SUCCEEDED, RunStatus.FAILED)
        for _ in range(500)
    ]
    # Runs sleeping or waiting for days are runnable by status but not due: not read
    # either (each status is read on its own: ``models.best``).
    sleeping = [
        JobRun(job_name="tests.noop", queue=queue, status=status, created_at=now)
        for queue in ("default", "mail")
        for status in (RunStatus.SLEEPING, RunStatus.WAITING)
        for _ in range(200)
    ]
    for run in sleeping:
        run.wake_at = now + timedelta(days=3)
    JobRun.objects.bulk_create(finished + sleeping, batch_size=500)
    for queue in ("default", "mail"):
        jobs.noop.using(queue=queue).enqueue()
    shortlist, lock = shortlist_and_lock(queues, now)
    plans = [plan for plan in explain(shortlist) if plan["table"] == JobRun._meta.db_table]
    # Each runnable status at the default priority and at the others (a claim of runs
    # under no limit does not read those under one).
    assert len(plans) == 6, plans
    for plan in plans:
        # Any of the claim's indexes (MariaDB's optimizer may pick either)...
        assert plan["key"] in CLAIM_INDEXES, plan
        # ...as long as neither the finished runs nor the sleeping ones are read.
        assert plan["type"] in ("range", "ref") and int(plan["rows"]) < 10, plan
    [plan] = explain(lock)
    assert "SKIP LOCKED" in lock and plan["key"] == "PRIMARY", plan


@pytest.mark.mariadb(reason="the plan of the claim's statements on MariaDB")
@pytest.mark.django_db(transaction=True)  # ANALYZE TABLE commits
@pytest.mark.parametrize("queues", [None, ["default"]], ids=["all-queues", "a-quiet-queue"])
def test_behind_a_backlog_the_claim_reads_queued_runs_in_order(
    clock: FakeClock, queues: list[str] | None
) -> None:
    """Behind thousands of due queued runs the claim does not sort them all: it reads
    queued runs in its order (``durable_run_unlimited_order``) and stops, also when it
    serves a queue other than the backlog's."""
    now = clock.now()
    backlog = [
        JobRun(
            job_name="tests.noop",
            queue=queue,
            status=RunStatus.QUEUED,
            priority=index % 3,
            created_at=now,
            wake_at=now - timedelta(seconds=index),
        )
        for queue, count in (("mail", 3000), ("default", 100))
        for index in range(count)
    ]
    JobRun.objects.bulk_create(backlog, batch_size=1000)
    connection.cursor().execute(f"ANALYZE TABLE {JobRun._meta.db_table}")
    shortlist, _ = shortlist_and_lock(queues, now)
    verb = "ANALYZE" if getattr(connection, "mysql_is_mariadb", False) else "EXPLAIN"
    # The first of the union's reads is the queued runs'.
    queued = next(p for p in explain(shortlist, verb) if p["table"] == JobRun._meta.db_table)
    assert queued["key"].startswith("durable_run_unlimited_order"), queued
    assert "filesort" not in (queued["Extra"] or ""), queued
    if verb == "ANALYZE":  # rows read, not estimated: the shortlist's length, not 3,000
        assert float(queued["r_rows"]) <= 1 + SHORTLIST_SPARE, queued


@pytest.mark.django_db(transaction=True)
def test_a_claim_in_progress_leaves_the_other_runs_to_a_concurrent_claim(
    clock: FakeClock,
) -> None:
    if not connection.features.has_select_for_update_skip_locked:
        pytest.skip("SQLite serialises writers: no claim runs beside another")
    runs = {jobs.noop.enqueue().pk for _ in range(5)}
    held, done = threading.Event(), threading.Event()
    got: dict[str, list[JobRun]] = {}

    def first() -> None:
        try:
            # The first claim's locks stay held, as they are while it writes.
            with transaction.atomic():
                got["first"] = claim("first", now=clock.now(), lease=LEASE)
                held.set()
                done.wait(10)
        finally:
            connection.close()

    thread = threading.Thread(target=first)
    thread.start()
    try:
        assert held.wait(10)
        got["second"] = claim("second", now=clock.now(), lease=LEASE)
    finally:
        done.set()
        thread.join()
    first_ids = {run.pk for run in got["first"]}
    second_ids = {run.pk for run in got["second"]}
    assert len(first_ids) == 1 and len(second_ids) == 1  # not "nothing to claim"
    assert first_ids != second_ids and first_ids | second_ids <= runs


@pytest.mark.mariadb(reason="the plan of the claim's statements on MariaDB")
@pytest.mark.django_db(transaction=True)  # ANALYZE TABLE commits
def test_a_saturated_keys_held_backlog_is_not_read_by_every_claim(clock: FakeClock) -> None:
    """Runs held back by a full concurrency key are queued without a wake time, which
    MariaDB sorts first: an index in the claim's order held them ahead of every due run
    of their priority, and each claim read them all (61 ms a claim behind 50,000 held
    runs, in a review). Neither the flow claim's look nor the claim reads them."""
    now = clock.now()
    held = [
        JobRun(
            job_name="tests.limited",
            status=RunStatus.QUEUED,
            concurrency_limit=1,
            concurrency_key="k",
            created_at=now,
            wake_at=None,
        )
        for _ in range(3000)
    ]
    due = [
        JobRun(job_name="tests.noop", status=RunStatus.QUEUED, created_at=now, wake_at=now)
        for _ in range(100)
    ]
    JobRun.objects.bulk_create(held + due, batch_size=1000)
    connection.cursor().execute(f"ANALYZE TABLE {JobRun._meta.db_table}")
    with CaptureQueriesContext(connection) as queries:
        assert len(claim("w", now=now, lease=LEASE)) == 1
    reads = [
        q["sql"]
        for q in queries
        if q["sql"].lstrip("(").startswith("SELECT") and "UNION ALL" in q["sql"]
    ]
    assert len(reads) == 2, reads  # the flow claim's look, the claim's shortlist
    verb = "ANALYZE" if getattr(connection, "mysql_is_mariadb", False) else "EXPLAIN"
    for read in reads:
        for plan in explain(read, verb):
            if plan["table"] != JobRun._meta.db_table:
                continue
            rows = float(plan["r_rows"] if verb == "ANALYZE" else plan["rows"])
            assert rows <= 1 + max(SHORTLIST_SPARE, flow.CANDIDATES), (plan, read)
