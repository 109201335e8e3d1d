"""The ORM-backed ``StepStore`` (``event_log``: the ``EventLookup``), and how a parent
reads its child runs' outcomes.

Every step write is one statement. With a lease ``owner`` the write is *fenced*:
it only lands while that worker still holds the run's lease, so a worker that was
paused past its lease cannot record anything after another worker took over.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager
from typing import Any
from uuid import UUID

from django.db import connections, transaction

from .. import signals
from ..engine.records import ChildOutcome, RecordedStep, StepStore
from ..engine.serialization import ErrorInfo
from ..engine.vocabulary import StepKind, StepStatus
from ..exceptions import DurableJobsError, RunCancelled
from ..models import JobRun, RunStatus, StepRecord
from . import dialect, faults
from .fenced import fenced_sql, lease
from .reads import Read
from .step_transaction import StepTransaction, step_transaction


class LeaseLost(DurableJobsError):
    """This worker no longer holds the run's lease; another worker owns it now."""

    code = "X_LEASE_LOST"
    retryable = False


def _columns(record: RecordedStep) -> dict[str, Any]:
    """A record's row, column by column: the one place a step column is named (the
    fenced INSERT and its parameter types are built from these keys and ``_meta``)."""
    error = record.error
    return {
        "status": str(record.status),
        "output": record.output,
        "started_at": record.started_at,
        "completed_at": record.completed_at,
        "wake_at": record.wake_at,
        "event": record.event or "",
        "correlation_key": record.correlation_key,
        "child": record.child,
        "event_cursor": record.event_cursor,
        "attempts": record.attempts,
        "error": error.message if error else "",
        "error_type": error.type if error else "",
        "traceback": error.traceback if error else "",
        "kind": str(record.kind),
        "deadline": record.deadline,
        "last_started_at": record.last_started_at,
    }


#: What a record is read from, in ``StepRecord`` fields.
STEP_FIELDS = (
    "run_id",
    "name",
    "status",
    "started_at",
    "attempts",
    "output",
    "completed_at",
    "wake_at",
    "event",
    "correlation_key",
    "child",
    "event_cursor",
    "error",
    "error_type",
    "traceback",
    "kind",
    "deadline",
    "last_started_at",
)


def to_record(row: StepRecord) -> RecordedStep:
    return record_of(tuple(getattr(row, field) for field in STEP_FIELDS))


def record_of(values: tuple[Any, ...]) -> RecordedStep:
    """The record of a row's ``STEP_FIELDS`` values."""
    row = dict(zip(STEP_FIELDS, values, strict=True))
    error = None
    if row["status"] == StepStatus.FAILED or row["error_type"]:
        error = ErrorInfo(type=row["error_type"], message=row["error"], traceback=row["traceback"])
    return RecordedStep(
        run_id=str(row["run_id"]),
        name=row["name"],
        status=StepStatus(row["status"]),
        started_at=row["started_at"],
        attempts=row["attempts"],
        output=row["output"],
        completed_at=row["completed_at"],
        wake_at=row["wake_at"],
        event=row["event"] or None,
        correlation_key=row["correlation_key"],
        child=str(row["child"]) if row["child"] is not None else None,
        event_cursor=row["event_cursor"],
        error=error,
        kind=StepKind(row["kind"]),
        deadline=row["deadline"],
        last_started_at=row["last_started_at"],
    )


#: A run's steps in first-run order (``OrmStepStore.list``), compiled once.
_STEPS = Read(
    lambda run: StepRecord.objects.filter(run_id=run).order_by("id").values_list(*STEP_FIELDS),
    UUID(int=1),
)


def _fault_point(record: RecordedStep) -> str:
    """The fault point a step write passes before its statement (see faults.py)."""
    if record.status in (StepStatus.SLEEPING, StepStatus.WAITING):
        return "suspend.write"
    if record.status is StepStatus.COMPLETED and record.kind is StepKind.WAIT:
        return "event.matched"
    if record.status is StepStatus.COMPLETED and record.kind is StepKind.RUN:
        return "step.before_record"
    if record.status is StepStatus.COMPLETED and record.kind is StepKind.ATOMIC:
        return "atomic.before_record"
    return ""


class OrmStepStore:
    """Step records in ``StepRecord`` rows on the jobs database."""

    def __init__(self, *, using: str = "default", owner: str | None = None) -> None:
        self.using = using
        self.owner = owner
        self._known: set[tuple[str, str]] = set()
        #: The atomic step's transaction the store writes in, if any.
        self.in_step: StepTransaction | None = None

    def _rows(self) -> Any:
        return StepRecord.objects.using(self.using)

    def get(self, run_id: str, name: str) -> RecordedStep | None:
        row = self._rows().filter(run_id=run_id, name=name).first()
        if row is None:
            return None
        self._known.add((run_id, name))
        return to_record(row)

    def list(self, run_id: str) -> Sequence[RecordedStep]:
        records = [record_of(values) for values in _STEPS.rows(self.using, run_id)]
        self._known.update((run_id, record.name) for record in records)
        return records

    def put(self, record: RecordedStep) -> None:
        ident = (record.run_id, record.name)
        values = _columns(record)
        faults.hit(_fault_point(record), self.using)
        # An atomic step's record also locks the run's row (see step_transaction.py).
        locked = "_locked" if self.in_step is not None else ""
        if ident not in self._known:
            written = self._insert(record.run_id, record.name, values, locked)
        elif self.owner is None:
            written = self._rows().filter(run_id=record.run_id, name=record.name).update(**values)
        else:
            statement = f"durable_step_update{locked}"
            written = self._fenced(statement, record.run_id, record.name, values)
        if written == 0:
            raise self._refused(record)
        if self.in_step is not None:  # what follows waits for the commit
            self._known.add(ident)
            self.in_step.records.append(record)
            return
        self.recorded(record)

    def forget(self, record: RecordedStep) -> None:
        """A write rolled back with its step's transaction: the row does not exist."""
        self._known.discard((record.run_id, record.name))

    def recorded(self, record: RecordedStep) -> None:
        """What follows a write that landed (``put``, ``put_many``, an atomic step's
        commit)."""
        self._known.add((record.run_id, record.name))
        if record.status is StepStatus.COMPLETED and record.kind is StepKind.RUN:
            faults.hit("step.recorded", self.using)
        if record.status is StepStatus.COMPLETED:
            signals.announce(
                signals.step_completed, sender=JobRun, run_id=record.run_id, step=record
            )

    def _refused(self, record: RecordedStep) -> DurableJobsError:
        """Why a fenced write did not land: the run was cancelled, or taken over.

        Cancelled while this worker still holds the lease (``runs.cancel`` leaves it):
        a step that completed is recorded all the same, so that a retry replays it
        instead of running its side effect twice; then the run stops."""
        status = (
            JobRun.objects.using(self.using)
            .filter(pk=record.run_id, lease_owner=self.owner)
            .values_list("status", flat=True)
            .first()
        )
        if status == RunStatus.CANCELLED:
            # An atomic step's record rolls back with its writes: nothing is kept.
            kept = self.in_step is None and self._kept(record)
            kept_text = "is recorded, the run stops here" if kept else "is not recorded"
            return RunCancelled(
                f"run {record.run_id} was cancelled; step {record.name!r} {kept_text}"
            )
        return LeaseLost(
            f"run {record.run_id}: not recording step {record.name!r}: this worker "
            f"({self.owner}) no longer holds the run's lease"
        )

    def _kept(self, record: RecordedStep) -> bool:
        """Record a completed step of a run cancelled while this worker holds its lease,
        the run's row locked meanwhile (a retry cannot start it); False if the run is
        no longer that, or the record is not a completed step."""
        if record.status is not StepStatus.COMPLETED:
            return False
        values = _columns(record)
        with transaction.atomic(using=self.using):
            held = (
                JobRun.objects.using(self.using)
                .select_for_update()
                .filter(pk=record.run_id, lease_owner=self.owner, status=RunStatus.CANCELLED)
                .exists()
            )
            rows = self._rows().filter(run_id=record.run_id, name=record.name)
            if held and not rows.update(**values):
                self._rows().create(run_id=record.run_id, name=record.name, **values)
        if held:
            self.recorded(record)
        return held

    def _insert(self, run_id: str, name: str, values: dict[str, Any], locked: str = "") -> int:
        if self.owner is None:
            self._rows().create(run_id=run_id, name=name, **values)
            return 1
        return self._fenced(f"durable_step_insert{locked}", run_id, name, values)

    def _fenced(self, statement: str, run_id: str, name: str, values: dict[str, Any]) -> int:
        """Write the record in one statement that lands only while this worker holds
        the run's lease (``_FENCED``); the rows written."""
        connection = connections[self.using]
        fields, sql, types = fenced_sql(connection, statement, tuple(values))
        written = zip(fields, [run_id, name, *values.values()], strict=True)
        leased = [*written, *lease(run_id, self.owner)]
        return dialect.of(self.using).execute_fenced(statement, sql, leased, types)

    def delete(self, run_id: str, name: str) -> None:
        self._rows().filter(run_id=run_id, name=name).delete()
        self._known.discard((run_id, name))

    def atomic(self) -> Any:
        return transaction.atomic(using=self.using)

    def step_transaction(
        self, kind: StepKind = StepKind.ATOMIC
    ) -> AbstractContextManager[StepTransaction]:
        return step_transaction(self, kind)

    def clear(self, run_id: str) -> None:
        self._rows().filter(run_id=run_id).delete()
        self._known = {ident for ident in self._known if ident[0] != run_id}


def put_many(items: Sequence[tuple[StepStore, RecordedStep]]) -> list[Exception | None]:
    """``put`` each record into its store: the new records of fenced ORM stores in one
    statement where the database can (``Dialect.insert_steps``: one commit for the
    steps that a batch of async runs reached together), the rest one by one. Returns,
    per item, None or the exception its ``put`` would have raised (each record is
    written or refused on its own: a lost lease refuses that run's record only)."""
    results: list[Exception | None] = [None] * len(items)
    batch: list[tuple[int, OrmStepStore, RecordedStep]] = []
    for index, (store, record) in enumerate(items):
        if (
            isinstance(store, OrmStepStore)
            and store.owner is not None
            and (record.run_id, record.name) not in store._known
        ):
            try:
                faults.hit(_fault_point(record), store.using)
            except Exception as exc:
                results[index] = exc
                continue
            batch.append((index, store, record))
            continue
        try:
            store.put(record)
        except Exception as exc:
            results[index] = exc
    by_database: dict[str, list[tuple[int, OrmStepStore, RecordedStep]]] = {}
    for entry in batch:
        by_database.setdefault(entry[1].using, []).append(entry)
    for using, entries in by_database.items():
        _insert_many(using, entries, results)
    return results


def _insert_many(
    using: str,
    entries: list[tuple[int, OrmStepStore, RecordedStep]],
    results: list[Exception | None],
) -> None:
    columns = [_columns(record) for _, _, record in entries]
    names = ("run", "name", *columns[0])
    rows = [
        (record.run_id, record.name, *values.values())
        for (_, _, record), values in zip(entries, columns, strict=True)
    ]
    owners = [store.owner or "" for _, store, _ in entries]
    try:
        written = dialect.of(using).insert_steps(names, rows, owners)
        if written is None and len(entries) > 1:
            written = _insert_together(using, entries)
    except Exception:
        # Nothing was written. One record the database refuses must not fail the
        # others: each is written on its own (a lost connection fails each anyway).
        written = None
    for index, store, record in entries:
        if written is None:  # one by one (no batched insert here), fault point passed
            try:
                if store._insert(record.run_id, record.name, _columns(record)) == 0:
                    raise store._refused(record)
            except Exception as exc:
                results[index] = exc
                continue
        elif (str(UUID(str(record.run_id))), record.name) not in written:
            results[index] = store._refused(record)
            continue
        try:
            store.recorded(record)
        except Exception as exc:
            results[index] = exc


def _insert_together(
    using: str, entries: list[tuple[int, OrmStepStore, RecordedStep]]
) -> set[tuple[str, str]]:
    """Where the dialect has no one-statement insert (MariaDB, SQLite): each record's
    fenced INSERT, all in one transaction, one commit for the batch instead of one
    each; the (run id, name) written. A record whose run's lease is lost inserts no
    row and is refused alone; one the database refuses raises, rolling back the
    others (``_insert_many`` then writes each on its own)."""
    written: set[tuple[str, str]] = set()
    with transaction.atomic(using=using):
        for _, store, record in entries:
            if store._insert(record.run_id, record.name, _columns(record)):
                written.add((str(UUID(str(record.run_id))), record.name))
    return written


#: What a parent reads of a child run to learn how it ended (``child_outcome``).
CHILD_COLUMNS = ("status", "result", "error", "error_type", "error_code")


def child_run_outcome(using: str, child_run_id: str) -> ChildOutcome | None:
    """How the child run ``child_run_id`` ended; None while it has not."""
    row = JobRun.objects.using(using).filter(pk=child_run_id).values(*CHILD_COLUMNS).first()
    return child_outcome(row)


def child_outcome(row: Mapping[str, Any] | None) -> ChildOutcome | None:
    """How a child run ended, from its ``CHILD_COLUMNS``; None while it has not."""
    if row is None:
        return ChildOutcome(
            False, error=ErrorInfo(type="", message="the child run is gone", traceback="")
        )
    if row["status"] == RunStatus.SUCCEEDED:
        return ChildOutcome(True, result=row["result"])
    if row["status"] in (RunStatus.FAILED, RunStatus.CANCELLED):
        return ChildOutcome(
            False,
            error=ErrorInfo(
                type=str(row["error_type"]),
                message=str(row["error"] or row["status"]),
                traceback="",
                code=str(row["error_code"]),
            ),
        )
    return None
