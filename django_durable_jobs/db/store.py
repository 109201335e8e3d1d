"""The ORM-backed ``StepStore`` and ``EventLookup``.

Every step write is one statement. With a lease ``owner`` the write is *fenced*:
it only lands while that worker still holds the run's lease, so a worker that was
paused past its lease cannot record anything after another worker took over.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, cast
from uuid import UUID

from django.db import connections, transaction
from django.db.models import Exists, F, Field, Max

from .. import faults, signals
from ..engine.records import ChildOutcome, EventHit, RecordedStep, StepStore
from ..engine.serialization import ErrorInfo
from ..engine.vocabulary import StepKind, StepStatus
from ..exceptions import DurableJobsError, RunCancelled
from ..models import Event, EventPosition, JobRun, RunStatus, StepRecord
from . import dialect


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


def to_record(row: StepRecord) -> RecordedStep:
    error = None
    if row.status == StepStatus.FAILED or row.error_type:
        error = ErrorInfo(type=row.error_type, message=row.error, traceback=row.traceback)
    return RecordedStep(
        run_id=str(row.run_id),
        name=row.name,
        status=StepStatus(row.status),
        started_at=row.started_at,
        attempts=row.attempts,
        output=row.output,
        completed_at=row.completed_at,
        wake_at=row.wake_at,
        event=row.event or None,
        correlation_key=row.correlation_key,
        child=str(row.child) if row.child is not None else None,
        event_cursor=row.event_cursor,
        error=error,
        kind=StepKind(row.kind),
        deadline=row.deadline,
        last_started_at=row.last_started_at,
    )


def _fault_point(record: RecordedStep) -> str:
    """The fault point a step write passes before its statement (see faults.py)."""
    if record.status in (StepStatus.SLEEPING, StepStatus.WAITING):
        return "suspend.write"
    if record.status is StepStatus.COMPLETED and record.kind is StepKind.WAIT:
        return "event.matched"
    if record.status is StepStatus.COMPLETED and record.kind is StepKind.RUN:
        return "step.before_record"
    return ""


class OrmStepStore:
    """Step records in ``StepRecord`` rows on the jobs database."""

    def __init__(self, *, using: str = "default", owner: str | None = None) -> None:
        self.using = using
        self.owner = owner
        self._known: set[tuple[str, str]] = set()

    def _rows(self) -> Any:
        return StepRecord.objects.using(self.using)

    def get(self, run_id: str, name: str) -> RecordedStep | None:
        row = self._rows().filter(run_id=run_id, name=name).first()
        if row is None:
            return None
        self._known.add((run_id, name))
        return to_record(row)

    def list(self, run_id: str) -> Sequence[RecordedStep]:
        records = [to_record(row) for row in self._rows().filter(run_id=run_id).order_by("id")]
        self._known.update((run_id, record.name) for record in records)
        return records

    def put(self, record: RecordedStep) -> None:
        ident = (record.run_id, record.name)
        values = _columns(record)
        faults.hit(_fault_point(record), self.using)
        if ident in self._known:
            rows = self._rows().filter(run_id=record.run_id, name=record.name)
            if self.owner is not None:
                rows = rows.filter(run__lease_owner=self.owner, run__status=RunStatus.RUNNING)
            written = rows.update(**values)
        else:
            written = self._insert(record.run_id, record.name, values)
        if written == 0:
            raise self._refused(record)
        self._recorded(record)

    def _recorded(self, record: RecordedStep) -> None:
        """What follows a write that landed (``put``, ``put_many``)."""
        self._known.add((record.run_id, record.name))
        if record.status is StepStatus.COMPLETED and record.kind is StepKind.RUN:
            faults.hit("step.recorded", self.using)
        if record.status is StepStatus.COMPLETED:
            signals.step_completed.send(sender=JobRun, run_id=record.run_id, step=record)

    def _refused(self, record: RecordedStep) -> DurableJobsError:
        """Why a fenced write did not land: the run was cancelled, or taken over."""
        status = (
            JobRun.objects.using(self.using)
            .filter(pk=record.run_id, lease_owner=self.owner)
            .values_list("status", flat=True)
            .first()
        )
        if status == RunStatus.CANCELLED:
            return RunCancelled(
                f"run {record.run_id} was cancelled; step {record.name!r} is not recorded"
            )
        return LeaseLost(
            f"run {record.run_id}: not recording step {record.name!r}: this worker "
            f"({self.owner}) no longer holds the run's lease"
        )

    def _insert(self, run_id: str, name: str, values: dict[str, Any]) -> int:
        if self.owner is None:
            self._rows().create(run_id=run_id, name=name, **values)
            return 1
        # INSERT ... SELECT ... FROM run WHERE lease_owner = me: fenced in one statement.
        connection = connections[self.using]
        fields, sql, types = _fenced_insert(connection, tuple(values))
        params = [
            field.get_db_prep_save(value, connection)
            for field, value in zip(fields, [run_id, name, *values.values()], strict=True)
        ]
        run_meta = JobRun._meta
        assert run_meta.pk is not None
        run_pk = run_meta.pk.get_db_prep_value(run_id, connection)
        params = [*params, run_pk, self.owner, RunStatus.RUNNING.value]
        return dialect.of(self.using).execute_fenced("durable_step_insert", sql, params, types)

    def delete(self, run_id: str, name: str) -> None:
        self._rows().filter(run_id=run_id, name=name).delete()
        self._known.discard((run_id, name))

    def atomic(self) -> Any:
        return transaction.atomic(using=self.using)

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
            store._recorded(record)
        except Exception as exc:
            results[index] = exc


#: (database alias, the columns written) -> ``_fenced_insert``'s answer: built once per process
#: (building it cost as much as sending it).
_FENCED_INSERTS: dict[tuple[str, tuple[str, ...]], tuple[list[Any], str, list[str]]] = {}


def _fenced_insert(connection: Any, columns: tuple[str, ...]) -> tuple[list[Any], str, list[str]]:
    """The fields, the SQL and the parameter types of the fenced step INSERT writing
    ``columns`` (after ``run`` and ``name``), for this connection's database."""
    key = (connection.alias, columns)
    if key not in _FENCED_INSERTS:
        qn = connection.ops.quote_name
        meta = StepRecord._meta
        fields = [
            cast("Field[Any, Any]", meta.get_field(name)) for name in ("run", "name", *columns)
        ]
        run_meta = JobRun._meta
        assert run_meta.pk is not None
        placeholders = [f"${number}" for number in range(1, len(fields) + 4)]
        sql = (
            f"INSERT INTO {qn(meta.db_table)} ({', '.join(qn(str(f.column)) for f in fields)}) "
            f"SELECT {', '.join(placeholders[: len(fields)])} FROM {qn(run_meta.db_table)} "
            f"WHERE {qn(str(run_meta.pk.column))} = {placeholders[-3]} "
            f"AND {qn('lease_owner')} = {placeholders[-2]} AND {qn('status')} = {placeholders[-1]}"
        )
        # The parameters' types, from the same fields as the statement.
        guards = [run_meta.pk, run_meta.get_field("lease_owner"), run_meta.get_field("status")]
        types = [str(field.db_type(connection)) for field in [*fields, *guards]]
        _FENCED_INSERTS[key] = (fields, sql, types)
    return _FENCED_INSERTS[key]


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


_BATCH = 1000


def _next_position(using: str) -> int:
    """Take the next position; the row stays locked until the caller's transaction ends."""
    rows = EventPosition.objects.using(using).filter(pk=1)
    if not rows.update(position=F("position") + 1):
        # The row is missing (a flushed database): start after the largest position.
        start = Event.objects.using(using).aggregate(top=Max("position"))["top"] or 0
        EventPosition.objects.using(using).bulk_create(
            [EventPosition(pk=1, position=start)], ignore_conflicts=True
        )
        rows.update(position=F("position") + 1)
    return int(rows.values_list("position", flat=True).get())


class OrmEventLog:
    """The reads of ``EventLookup`` over ``Event`` rows: cursors are positions, hits
    carry the ids. Publishing is a verb (gates, runs started by the event, wake-ups):
    ``events.EventLog`` adds it, so this layer never imports the verbs."""

    def __init__(self, *, using: str = "default") -> None:
        self.using = using

    def cursor(self, event: str | None = None, key: str | None = None) -> int:
        """A position such that the events committed now (named ``event``, with
        ``key``, if given) come at or before it, and those committed later after it.

        Ids cannot be that: an id is taken at INSERT, so a transaction that inserted
        an event and commits later leaves a smaller id behind a cursor. Instead the
        cursor takes the next position (its row lock makes cursors one after another)
        and stamps it on every committed event still without one; events that commit
        later keep NULL until a later cursor stamps a larger position on them.
        Publishing is untouched: an INSERT, as before.
        """
        events = Event.objects.using(self.using)
        # Usually every committed event of this name and key has a position: then the
        # newest position handed out already separates them from later ones. One
        # statement reads both in one snapshot, and nothing is written.
        newest = (
            EventPosition.objects.using(self.using)
            .filter(pk=1)
            .filter(~Exists(events.unpositioned(event, key)))
            .values_list("position", flat=True)
            .first()
        )
        if newest is not None:
            return int(newest)
        with transaction.atomic(using=self.using):
            position = _next_position(self.using)
            # Read the ids first, then write by primary key: an UPDATE over the index
            # range would wait (MariaDB) on rows other transactions have not committed.
            ids = list(events.unpositioned(event, key).values_list("id", flat=True))
            for start in range(0, len(ids), _BATCH):
                events.filter(id__in=ids[start : start + _BATCH]).update(position=position)
        return position

    def find(self, event: str, key: str | None, after: int) -> EventHit | None:
        row = Event.objects.using(self.using).matching(event, key, after).first()
        if row is None:
            return None
        return EventHit(row.id, row.payload, row.published_at)
