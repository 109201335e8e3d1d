"""One contract, two implementations: the in-memory and the ORM step store / event log."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from django.db import IntegrityError, connection

from django_durable_jobs.db.store import LeaseLost, OrmStepStore, put_many
from django_durable_jobs.engine.clock import FakeClock
from django_durable_jobs.engine.serialization import ErrorInfo
from django_durable_jobs.engine.sync_steps import (
    EventLookup,
    MemoryEventLog,
    MemoryStepStore,
    RecordedStep,
    StepStatus,
    StepStore,
)
from django_durable_jobs.exceptions import RunCancelled
from django_durable_jobs.models import JobRun, StepRecord
from django_durable_jobs.verbs.events import EventLog
from tests.factories import T0, EventFactory, JobRunFactory, StepRecordFactory

pytestmark = pytest.mark.django_db


#: The lease owner of the runs of ``run_ids``: the "fenced" store writes as it, each
#: write one statement that lands only while it holds the run's lease (the worker's way).
OWNER = "w1"


@pytest.fixture(params=["memory", "orm", "fenced"])
def store(request: pytest.FixtureRequest) -> StepStore:
    if request.param == "memory":
        return MemoryStepStore()
    return OrmStepStore(owner=OWNER if request.param == "fenced" else None)


@pytest.fixture
def run_ids() -> list[str]:
    return [str(JobRunFactory.create(status="running", lease_owner=OWNER).id) for _ in range(2)]


def record(run_id: str, name: str, **changes: Any) -> RecordedStep:
    values: dict[str, Any] = {
        "run_id": run_id,
        "name": name,
        "status": StepStatus.COMPLETED,
        "started_at": T0,
        "attempts": 1,
        "output": {"v": name},
    }
    values.update(changes)
    return RecordedStep(**values)


def test_put_get_round_trips_every_field(store: StepStore, run_ids: list[str]) -> None:
    full = record(
        run_ids[0],
        "wait",
        status=StepStatus.WAITING,
        output=None,
        wake_at=T0 + timedelta(days=1),
        completed_at=None,
        event="order.paid",
        correlation_key="42",
        event_cursor=17,
        attempts=3,
        kind="wait",
        deadline=T0 + timedelta(days=7),
    )
    store.put(full)
    assert store.get(run_ids[0], "wait") == full
    failed = record(
        run_ids[0],
        "boom",
        status=StepStatus.FAILED,
        output=None,
        error=ErrorInfo(type="builtins.ValueError", message="bad", traceback="tb"),
    )
    store.put(failed)
    got = store.get(run_ids[0], "boom")
    assert got is not None and got.error is not None
    assert (got.error.type, got.error.message, got.error.traceback) == (
        "builtins.ValueError",
        "bad",
        "tb",
    )


def test_an_update_rewrites_every_field(store: StepStore, run_ids: list[str]) -> None:
    """A known record written again (a wait that matched, a step retried) keeps none
    of its old values: through the fenced UPDATE, its placeholders in their order."""
    waiting = record(
        run_ids[0],
        "wait",
        status=StepStatus.WAITING,
        output=None,
        wake_at=T0 + timedelta(days=1),
        event="order.paid",
        correlation_key="42",
        event_cursor=17,
        kind="wait",
        deadline=T0 + timedelta(days=7),
    )
    store.put(waiting)
    matched = record(
        run_ids[0],
        "wait",
        status=StepStatus.COMPLETED,
        output={"paid": "€ 12 ✓", "lines": [1, 2]},
        completed_at=T0 + timedelta(hours=5),
        event="order.paid",
        correlation_key="42",
        event_cursor=18,
        attempts=2,
        kind="wait",
        deadline=T0 + timedelta(days=7),
        error=ErrorInfo(type="x.Y", message="ünïcode", traceback="tb"),
        last_started_at=T0 + timedelta(hours=4),
    )
    store.put(matched)
    assert store.get(run_ids[0], "wait") == matched
    assert [r.name for r in store.list(run_ids[1])] == []  # the other run's untouched


@pytest.mark.parametrize("output", [None, 0, "", [], {}, [1, "two", None], {"a": {"b": [True]}}])
def test_outputs_round_trip(store: StepStore, run_ids: list[str], output: Any) -> None:
    store.put(record(run_ids[0], "s", output=output))
    got = store.get(run_ids[0], "s")
    assert got is not None and got.output == output


def test_missing_is_none(store: StepStore, run_ids: list[str]) -> None:
    assert store.get(run_ids[0], "nope") is None
    assert list(store.list(run_ids[0])) == []


def test_list_keeps_first_run_order_across_updates(store: StepStore, run_ids: list[str]) -> None:
    for name in ["c", "a", "b"]:
        store.put(record(run_ids[0], name, status=StepStatus.FAILED))
    store.put(record(run_ids[0], "a", attempts=2))  # an update must not move it
    store.put(record(run_ids[1], "z"))
    assert [r.name for r in store.list(run_ids[0])] == ["c", "a", "b"]
    assert [r.attempts for r in store.list(run_ids[0])] == [1, 2, 1]
    assert [r.name for r in store.list(run_ids[1])] == ["z"]


def test_delete_and_clear(store: StepStore, run_ids: list[str]) -> None:
    for name in ["a", "b"]:
        store.put(record(run_ids[0], name))
    store.put(record(run_ids[1], "a"))
    store.delete(run_ids[0], "a")
    assert store.get(run_ids[0], "a") is None
    assert store.get(run_ids[1], "a") is not None
    store.clear(run_ids[0])
    assert list(store.list(run_ids[0])) == []
    assert [r.name for r in store.list(run_ids[1])] == ["a"]
    store.put(record(run_ids[0], "a"))  # a cleared name can be written again
    assert store.get(run_ids[0], "a") is not None


def test_orm_store_is_fenced_by_the_lease() -> None:
    run = JobRunFactory.create(status="running", lease_owner="w1")
    mine, stale = OrmStepStore(owner="w1"), OrmStepStore(owner="w0")
    mine.put(record(str(run.id), "a"))
    with pytest.raises(LeaseLost):
        stale.put(record(str(run.id), "b"))  # insert by a worker that lost the lease
    stale.list(str(run.id))
    with pytest.raises(LeaseLost):
        stale.put(record(str(run.id), "a", output="overwritten"))  # update likewise
    got = mine.get(str(run.id), "a")
    assert got is not None and got.output == {"v": "a"}
    assert [r.name for r in mine.list(str(run.id))] == ["a"]


@pytest.mark.django_db(transaction=True)  # each write commits, as a worker's does
def test_a_record_for_a_run_that_is_gone_is_refused_and_not_written() -> None:
    """Step records have no foreign-key constraint in the database (models/steps.py):
    the fenced write's check of the run is what keeps a record from outliving it, one
    by one and in a batch (one statement on PostgreSQL)."""
    gone, kept = (JobRunFactory.create(status="running", lease_owner="w") for _ in range(2))
    store = OrmStepStore(owner="w")
    JobRun.objects.filter(pk=gone.pk).delete()
    with pytest.raises(LeaseLost):
        store.put(record(str(gone.id), "alone"))
    errors = put_many(
        [(store, record(str(gone.id), "batched")), (store, record(str(kept.id), "a"))]
    )
    assert isinstance(errors[0], LeaseLost) and errors[1] is None
    assert list(StepRecord.objects.values_list("run_id", "name")) == [(kept.id, "a")]


@pytest.mark.psycopg3(reason="psycopg 3 writes a batch's step records in one statement")
def test_put_many_writes_each_record_or_refuses_it_alone(
    django_assert_max_num_queries: Any,
) -> None:
    """The async lane's batch: new records of fenced stores in one statement on
    PostgreSQL (elsewhere one by one); a run whose lease is lost has its record
    refused, and the others land. A run cancelled while its worker held the lease has
    its completed step recorded (a retry replays it) and is told it was cancelled."""
    running = [JobRunFactory.create(status="running", lease_owner=f"w{n}") for n in range(3)]
    lost = JobRunFactory.create(status="running", lease_owner="someone-else")
    cancelled = JobRunFactory.create(status="cancelled", lease_owner="w9")
    stores = [OrmStepStore(owner=f"w{n}") for n in range(3)]
    stores[0].put(record(str(running[0].id), "known"))  # an update, not an insert
    items: list[tuple[StepStore, RecordedStep]] = [
        (stores[0], record(str(running[0].id), "known", output={"v": "again"})),
        (stores[0], record(str(running[0].id), "ünï", output={"text": "Zoë \u2603"})),
        (stores[1], record(str(running[1].id), "a", output=None, completed_at=T0)),
        (stores[2], record(str(running[2].id), "a", output=[1, 2, {"x": "y"}])),
        (OrmStepStore(owner="w8"), record(str(lost.id), "a")),
        (OrmStepStore(owner="w9"), record(str(cancelled.id), "a")),
        (MemoryStepStore(), record("memory-run", "a")),
    ]
    # The update, the batch's INSERT, one read per refused record; one by one elsewhere.
    # The cancelled run's record: in a savepoint, its run's row locked, then an UPDATE
    # that finds nothing and the INSERT.
    with django_assert_max_num_queries(10 if connection.vendor == "postgresql" else 16):
        errors = put_many(items)
    assert errors[:4] == [None] * 4 and errors[6] is None
    assert isinstance(errors[4], LeaseLost)
    assert isinstance(errors[5], RunCancelled)
    outputs = {
        (str(row.run_id), row.name): row.output
        for row in StepRecord.objects.filter(run__in=[*running, lost, cancelled])
    }
    assert outputs == {
        (str(running[0].id), "known"): {"v": "again"},
        (str(running[0].id), "ünï"): {"text": "Zoë \u2603"},
        (str(running[1].id), "a"): None,
        (str(running[2].id), "a"): [1, 2, {"x": "y"}],
        (str(cancelled.id), "a"): record(str(cancelled.id), "a").output,
    }
    # Written records are known to their store: the next put of one is an update.
    stores[1].put(record(str(running[1].id), "a", output={"v": 2}))
    assert StepRecord.objects.get(run=running[1], name="a").output == {"v": 2}
    got = items[6][0].get("memory-run", "a")
    assert got is not None


@pytest.mark.django_db(transaction=True)  # the refused INSERT must not end a test transaction
def test_put_many_writes_the_others_when_the_database_refuses_one_record() -> None:
    first, second = (JobRunFactory.create(status="running", lease_owner="w") for _ in range(2))
    StepRecordFactory.create(run=first, name="dup")  # written, but unknown to this store
    store = OrmStepStore(owner="w")
    errors = put_many(
        [(store, record(str(first.id), "dup")), (store, record(str(second.id), "ok"))]
    )
    assert isinstance(errors[0], IntegrityError) and errors[1] is None
    assert StepRecord.objects.filter(run=second, name="ok").exists()


# -- event log ----------------------------------------------------------------------

Publish = Callable[..., int]


@pytest.fixture(params=["memory", "orm"])
def log(request: pytest.FixtureRequest) -> tuple[EventLookup, Publish]:
    if request.param == "memory":
        memory = MemoryEventLog(FakeClock())
        return memory, memory.publish

    def publish(name: str, payload: Any = None, *, key: str | None = None) -> int:
        return EventFactory.create(name=name, payload=payload, key=key).id

    return EventLog(), publish


def test_event_cursor_and_find(log: tuple[EventLookup, Publish]) -> None:
    events, publish = log
    start = events.cursor()
    publish("order.paid", {"n": 0}, key="42")
    after = events.cursor()
    assert after > start
    assert events.find("order.paid", "42", after) is None
    publish("order.paid", {"n": 1}, key="7")
    publish("order.shipped", {"n": 2}, key="42")
    hit_position = publish("order.paid", {"n": 3}, key="42")
    publish("order.paid", {"n": 4}, key="42")
    hit = events.find("order.paid", "42", after)
    assert hit is not None and hit.payload == {"n": 3} and hit.position == hit_position
    anykey = events.find("order.paid", None, after)
    assert anykey is not None and anykey.payload == {"n": 1}
    assert events.find("order.paid", "42", start) is not None
    assert events.find("order.paid", "42", start).payload == {"n": 0}  # type: ignore[union-attr]


def test_orm_store_reads_rows_written_elsewhere() -> None:
    step = StepRecordFactory.create(name="made", output={"a": [1, 2]}, attempts=2)
    got = OrmStepStore().get(str(step.run_id), "made")
    assert got is not None
    assert (got.status, got.output, got.attempts) == (StepStatus.COMPLETED, {"a": [1, 2]}, 2)
