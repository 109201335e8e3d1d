"""Reads compiled once (``db/reads.py``) and the claim that commits lazily (PostgreSQL):
the two shortcuts on the path from an enqueue or an event to the run's next step."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from datetime import timedelta
from typing import Any
from uuid import UUID

import pytest
from django.db import ProgrammingError, connection, transaction
from django.test.utils import CaptureQueriesContext

from django_durable_jobs.db.claims import claim
from django_durable_jobs.db.event_log import OrmEventLog
from django_durable_jobs.db.postgresql.statements import LAZY_COMMIT, binds_on_server
from django_durable_jobs.db.reads import Read
from django_durable_jobs.db.store import OrmStepStore, to_record
from django_durable_jobs.engine.records import RecordedStep
from django_durable_jobs.engine.serialization import ErrorInfo
from django_durable_jobs.engine.vocabulary import StepKind, StepStatus
from django_durable_jobs.models import Event, JobRun, StepRecord
from tests.factories import T0, EventFactory, JobRunFactory
from tests.testapp import jobs

pytestmark = pytest.mark.django_db


def test_a_read_gives_what_the_queryset_gives_for_every_value() -> None:
    runs = [JobRunFactory.create() for _ in range(3)]
    for index, run in enumerate(runs):
        for step in range(index + 1):
            StepRecord.objects.create(
                run=run,
                name=f"s{step} ✓",
                status="completed",
                output={"n": [step, "€"]},
                started_at=T0 + timedelta(minutes=step),
            )
    read = Read(
        lambda run: (
            StepRecord.objects.filter(run_id=run)
            .order_by("id")
            .values_list("name", "output", "started_at", "run_id")
        ),
        UUID(int=1),
    )
    for run in runs:
        expected = list(
            StepRecord.objects.filter(run_id=run.id)
            .order_by("id")
            .values_list("name", "output", "started_at", "run_id")
        )
        assert read.rows("default", str(run.id)) == expected
        assert read.rows("default", run.id) == expected  # a UUID or its text alike
    assert read.rows("default", str(UUID(int=7))) == []


def test_a_read_refuses_a_queryset_with_parameters_besides_its_stand_ins() -> None:
    lost = Read(lambda name: Event.objects.filter(name="fixed").values_list("id"), "\x00name")
    with pytest.raises(ValueError, match="not among the parameters"):
        lost.rows("default", "x")
    extra = Read(lambda name: Event.objects.filter(name=name, key="k").values_list("id"), "\x00n")
    with pytest.raises(ValueError, match="besides the stand-ins"):
        extra.rows("default", "x")


@pytest.mark.parametrize("key", [None, "42", "ключ ✓"])
def test_find_reads_the_first_event_after_the_cursor(key: str | None) -> None:
    log = OrmEventLog()
    before = EventFactory.create(name="order.paid", key=key, payload={"n": 1}, position=3)
    assert log.find("order.paid", key, 2) is not None
    hit = log.find("order.paid", key, 2)
    assert hit is not None and (hit.position, hit.payload) == (before.id, {"n": 1})
    assert log.find("order.paid", key, 3) is None  # positioned at the cursor: before it
    later = EventFactory.create(name="order.paid", key=key, payload=["é"], position=None)
    hit = log.find("order.paid", key, 3)
    assert hit is not None and (hit.position, hit.payload) == (later.id, ["é"])
    assert hit.published_at == later.published_at
    assert log.find("order.shipped", key, 0) is None


def test_list_reads_what_the_rows_hold() -> None:
    run = JobRunFactory.create(status="running", lease_owner="w1")
    store = OrmStepStore(owner="w1")
    written = [
        RecordedStep(
            run_id=str(run.id),
            name="a",
            status=StepStatus.COMPLETED,
            started_at=T0,
            attempts=1,
            output={"x": "ü"},
            completed_at=T0,
        ),
        RecordedStep(
            run_id=str(run.id),
            name="w",
            status=StepStatus.WAITING,
            started_at=T0,
            attempts=2,
            kind=StepKind.WAIT,
            event="e",
            correlation_key="k",
            event_cursor=9,
            deadline=T0 + timedelta(days=1),
            wake_at=T0 + timedelta(seconds=30),
            error=ErrorInfo(type="t", message="m", traceback="tb"),
        ),
    ]
    for record in written:
        store.put(record)
    assert list(store.list(str(run.id))) == written
    rows = StepRecord.objects.filter(run=run).order_by("id")
    assert [to_record(row) for row in rows] == written


#: Named statements and a lazy commit need parameters written into the query (the
#: default); a cursor that binds on the server sends each statement as text, committed
#: as usual (tests/settings.py: DURABLE_JOBS_TEST_CONNECTION_OPTIONS).
client_binding = pytest.mark.skipif(
    binds_on_server(connection), reason="server-side binding: no PREPARE, no lazy commit"
)


@pytest.mark.skipif(connection.vendor != "postgresql", reason="PostgreSQL's commit only")
@client_binding
@pytest.mark.django_db(transaction=True)
@pytest.mark.psycopg3(reason="the claim's statement is psycopg 3's")
def test_a_claim_commits_lazily_only_when_it_is_its_own_transaction() -> None:
    for _ in range(3):
        JobRunFactory.create(wake_at=T0)
    with CaptureQueriesContext(connection) as queries:
        first = claim("w1", now=T0 + timedelta(seconds=1), lease=timedelta(minutes=1))
    assert len(first) == 1 and first[0].lease_owner == "w1"
    sent = _claims(queries)
    assert sent and all(sql.startswith(LAZY_COMMIT) for sql in sent)
    # In the caller's transaction it would make the caller's commit lazy too: not then.
    with transaction.atomic(), CaptureQueriesContext(connection) as queries:
        second = claim("w2", now=T0 + timedelta(seconds=1), lease=timedelta(minutes=1))
    assert len(second) == 1 and second[0].id != first[0].id
    sent = _claims(queries)
    assert sent and not any("synchronous_commit" in sql for sql in sent)
    statuses: dict[Any, str] = dict(JobRun.objects.values_list("id", "status"))
    assert statuses[first[0].id] == statuses[second[0].id] == "running"
    # The setting ended with the claim's own transaction.
    with connection.cursor() as cursor:
        cursor.execute("SHOW synchronous_commit")
        assert cursor.fetchone()[0] == "on"


@pytest.mark.skipif(connection.vendor != "postgresql", reason="PostgreSQL's claim statement")
@pytest.mark.skipif(
    bool(connection.settings_dict["OPTIONS"].get("pool")),
    reason="a pool gives the same connection back after close(): no reconnect to see",
)
@pytest.mark.django_db(transaction=True)
@pytest.mark.psycopg3(reason="kept cursors are psycopg 3's")
def test_hot_statements_keep_a_cursor_until_a_reconnect_or_query_logging() -> None:
    """``kept_cursor``: one cursor from statement to statement (claims, ``enqueue``'s
    INSERT) on a connection; a new one after a reconnect (a stale one would raise);
    Django's own, recording cursor while queries are logged."""
    for _ in range(5):
        JobRunFactory.create(wake_at=T0)
    now, lease = T0 + timedelta(seconds=1), timedelta(minutes=1)
    later = jobs.add.using(run_after="1h")  # enqueued after T0: not claimed below
    claimed = claim("w0", now=now, lease=lease)  # this connection's PREPAREs, its cursor
    enqueued = [later.enqueue(1, 2), later.enqueue(3, 4)]  # as text, then prepared
    with cursors_made() as made:
        claimed += claim("w1", now=now, lease=lease)
        enqueued.append(later.enqueue(5, 6))
        claimed += claim("w2", now=now, lease=lease)
        assert made == []
        connection.close()
        claimed += claim("w3", now=now, lease=lease)
        assert made and made[-1].connection is connection.connection
        with CaptureQueriesContext(connection) as queries:
            claimed += claim("w4", now=now, lease=lease)
            enqueued.append(later.enqueue(7, 8))
        assert _claims(queries)  # recorded: not sent through the kept cursor
        assert any("django_durable_jobs_jobrun" in q["sql"] for q in queries.captured_queries[1:])
    assert [run.lease_owner for run in claimed] == ["w0", "w1", "w2", "w3", "w4"]
    assert JobRun.objects.filter(status="running").count() == 5
    stored = JobRun.objects.filter(pk__in=[run.pk for run in enqueued]).order_by("created_at")
    assert [run.args for run in stored] == [[1, 2], [3, 4], [5, 6], [7, 8]]


@contextmanager
def cursors_made() -> Iterator[list[Any]]:
    """The psycopg cursors Django makes on ``connection`` meanwhile, in order."""
    made: list[Any] = []
    real = connection.create_cursor

    def counted(name: Any = None) -> Any:
        made.append(real(name))
        return made[-1]

    connection.create_cursor = counted  # type: ignore[method-assign]
    try:
        yield made
    finally:
        del connection.create_cursor


def _claims(queries: CaptureQueriesContext) -> list[str]:
    """The claim statements sent (the flow claim's function, asked first when a job has
    a limit, records outcomes and is never lazy)."""
    sent = [q["sql"] for q in queries.captured_queries if not q["sql"].startswith("PREPARE")]
    marks = ("EXECUTE durable_claim_all", "claimed AS (")  # prepared, or sent as text
    return [sql for sql in sent if any(mark in sql for mark in marks)]


@pytest.mark.skipif(connection.vendor != "postgresql", reason="PostgreSQL's claim statement")
@pytest.mark.django_db(transaction=True)
@pytest.mark.psycopg3(reason="kept cursors are psycopg 3's")
def test_a_kept_cursor_is_made_again_when_the_time_zone_settings_change(settings: Any) -> None:
    """The timestamp loaders a kept cursor got were chosen under the settings of the
    day (``fast_timestamps``): an override of ``USE_TZ`` or ``TIME_ZONE`` gets a new
    cursor, and the claimed run reads as the ORM reads it."""
    for _ in range(2):
        JobRunFactory.create(wake_at=T0)
    now, lease = T0 + timedelta(seconds=1), timedelta(minutes=1)
    claim("w0", now=now, lease=lease)  # the kept cursor, made under USE_TZ = True, UTC
    with cursors_made() as made:
        settings.USE_TZ, settings.TIME_ZONE = False, "Europe/Paris"
        [run] = claim("w1", now=now, lease=lease)
    assert len(made) == 1
    read = JobRun.objects.get(pk=run.pk)
    assert (run.wake_at, run.created_at, run.started_at) == (
        read.wake_at,
        read.created_at,
        read.started_at,
    )


@pytest.mark.skipif(connection.vendor != "postgresql", reason="PostgreSQL's named statements")
@client_binding
@pytest.mark.django_db(transaction=True)
@pytest.mark.psycopg3(reason="prepared statements are psycopg 3's")
def test_statements_deallocated_behind_our_back_are_prepared_again() -> None:
    """A ``DEALLOCATE ALL`` on the connection (PgBouncer's session reset, psycopg's own
    after a rollback once it prepared a statement, an operator) drops the statements
    ``prepare`` made; the next claim, enqueue and step write prepare them again instead
    of failing on every call until the worker restarts."""
    for _ in range(2):
        JobRunFactory.create(wake_at=T0)
    now, lease = T0 + timedelta(seconds=1), timedelta(minutes=1)
    later = jobs.add.using(run_after="1h")
    claimed = claim("w1", now=now, lease=lease)
    enqueued = [later.enqueue(1, 2), later.enqueue(3, 4)]  # the second one prepared
    store = OrmStepStore(owner="w1")
    record = RecordedStep(
        run_id=str(claimed[0].pk),
        name="s",
        status=StepStatus.COMPLETED,
        started_at=now,
        output=1,
        attempts=1,
    )
    store.put(record)
    with connection.cursor() as cursor:
        cursor.execute("DEALLOCATE ALL")
    claimed += claim("w2", now=now, lease=lease)
    enqueued.append(later.enqueue(5, 6))
    store.put(replace(record, name="t"))
    # In the caller's transaction that one statement fails (the transaction is aborted
    # by then); the next call prepares again.
    with connection.cursor() as cursor:
        cursor.execute("DEALLOCATE ALL")
    with pytest.raises(ProgrammingError, match="does not exist"), transaction.atomic():
        later.enqueue(7, 8)
    enqueued.append(later.enqueue(9, 10))
    assert [run.lease_owner for run in claimed] == ["w1", "w2"]
    stored = JobRun.objects.filter(pk__in=[run.pk for run in enqueued]).order_by("created_at")
    assert [run.args for run in stored] == [[1, 2], [3, 4], [5, 6], [9, 10]]
    assert [r.name for r in store.list(str(claimed[0].pk))] == ["s", "t"]
