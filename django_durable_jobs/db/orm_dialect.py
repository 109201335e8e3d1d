"""The ORM's way of the database work that differs between databases (``Dialect``),
for any database Django supports, and what SQLite and MariaDB/MySQL do differently.
PostgreSQL's dialects are in ``postgresql/dialect.py``; ``dialect.of`` chooses one per
database alias.

- ``Dialect``: the ORM; SQLite gets it as it is (no row locks: claims read, then a
  guarded UPDATE that SQLite's single writer makes safe), plus taking its write lock
  first where a transaction reads before it writes.
- ``MySQL`` (MariaDB, MySQL): the claim locks a shortlist by primary key (no partial
  indexes), and reads that follow a lock ask for the latest committed rows.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager, nullcontext
from datetime import datetime, timedelta
from typing import Any, ClassVar

from django.db import connections, transaction
from django.db.models import Min, QuerySet

from ..engine.serialization import Arguments
from ..models import (
    RUNNABLE,
    FlowKey,
    JobRun,
    JobRunQuerySet,
    RunStatus,
    Schedule,
    best,
    read_best,
)
from .executable import Executable
from .params import numbered, prepared
from .paused import Paused
from .postgresql.claims import Finish
from .purge import Batch, Purged, delete_batch

#: What the claim reads of each run it picks: id, status, first start.
PICKED = ("id", "status", "started_at")
#: Runs shortlisted beyond ``limit`` on MySQL: so many workers claiming at the same
#: moment each still find an unlocked one.
SHORTLIST_SPARE = 16


class Dialect:
    """The ORM's way, for any database; subclasses override what their database does
    better or differently."""

    #: Outcomes written in the next claim's statement, runs inserted in one statement,
    #: prepared statements (``postgres.py``).
    fused: ClassVar[bool] = False
    #: Idle workers are woken by LISTEN/NOTIFY rather than by polling.
    listens: ClassVar[bool] = False
    #: How an idle worker hears of new work (``worker/wakeup.py``): ``"listen"``
    #: (LISTEN/NOTIFY), ``"data_version"`` (SQLite: a short poll of ``PRAGMA
    #: data_version``, which changes when another connection commits), ``"doorbell"``
    #: (a short poll of the one ``Doorbell`` row that enqueuers and publishers bump
    #: after their commit: ``db/doorbell.py``), or ``"poll"`` (the claim itself, every
    #: ``POLL_INTERVAL``).
    wake_by: ClassVar[str] = "poll"
    #: Who looks, after a publisher's commit, for the runs waiting for its event that
    #: its transaction could not wake (they parked while it was open, or another
    #: transaction held them): ``"publisher"`` (a statement after its commit),
    #: ``"worker"`` (the idle worker that hears of the event, by LISTEN or the
    #: doorbell: ``waking.wake_late``), or ``"nobody"`` (SQLite: one writer at a time,
    #: so no run can park while the publisher's transaction is open, and no row is
    #: locked).
    late_wake: ClassVar[str] = "publisher"
    #: The database's clock, read (``dbclock``); None: an unknown backend, whose
    #: processes trust their own clocks.
    now_sql: ClassVar[str | None] = None
    #: The finest step of the database's clock.
    clock_resolution: ClassVar[timedelta] = timedelta(microseconds=1)
    #: ``estimate`` gives the planner's row counts (``observe/counts.py``).
    estimates: ClassVar[bool] = False

    def __init__(self, using: str) -> None:
        self.using = using

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.using!r})"

    # -- claims ------------------------------------------------------------------
    def claim(
        self,
        owner: str,
        now: datetime,
        lease: timedelta,
        queues: list[str] | None,
        limit: int,
        only: Executable | None = None,
        paused: Paused | None = None,
    ) -> list[JobRun]:
        """Take up to ``limit`` runnable runs under no flow-control limit for ``owner``,
        best first (with ``only``, of the jobs and versions it lets this worker take;
        with ``paused``, none of a paused queue or job);
        each remembers the status it was claimed from (``claimed_from``) and whether it
        never started before (``claimed_fresh``)."""
        runs = JobRun.objects.using(self.using)
        # Runs under a limit are flow.claim_limited's, which locks their key first.
        candidates = runs.runnable(now, queues).filter(
            concurrency_limit__isnull=True, throttle_limit__isnull=True
        )
        if only is not None:
            candidates = candidates.filter(only.q())
        if paused:
            candidates = candidates.filter(paused.q())
        with self.claiming():
            picked = self.pick(candidates, limit, queues)
            before = {run_id: status for run_id, status, _ in picked}
            fresh = {run_id for run_id, _, started_at in picked if started_at is None}
            if not before:
                return []
            # A run another worker took meanwhile is no longer runnable: not taken.
            runs.filter(id__in=before).take(owner, now, lease)
            claimed = list(runs.filter(id__in=before, lease_owner=owner, status=RunStatus.RUNNING))
        for run in claimed:
            run.claimed_from = before[run.id]
            run.claimed_fresh = run.id in fresh
        claimed.sort(key=lambda run: (-run.priority, run.wake_at or now))
        return claimed

    def claim_concurrency(
        self,
        owner: str,
        now: datetime,
        lease: timedelta,
        queues: list[str] | None,
        limit: int,
        candidates: int,
        finishes: Sequence[Finish],
        only: Executable | None = None,
        paused: Paused | None = None,
    ) -> tuple[list[JobRun], frozenset[Any], bool] | None:
        """Runs under a concurrency limit claimed in one call, recording first
        ``finishes`` (outcomes of runs that held a slot): the runs, the ids of the
        outcomes recorded, and whether throttled runs were seen among ``candidates``;
        None where the dialect has no such call (``flow.limits.claim_limited`` then
        takes a transaction per key)."""
        return None

    def lock_key(self, job_name: str, kind: str, key: str) -> None:
        """Lock one flow-control key until the transaction ends: the key's ``FlowKey``
        row, in one upsert (``INSERT ... ON CONFLICT DO UPDATE`` / ``ON DUPLICATE KEY
        UPDATE``). It takes the row's write lock whether or not the row existed, so the
        first claimers (or enqueuers) of a new key queue up on it instead of
        deadlocking as two inserts would on MariaDB, and nothing is read before the
        lock is held."""
        connection = connections[self.using]
        # MySQL/MariaDB name no conflict target: ON DUPLICATE KEY covers every unique key.
        target = connection.features.supports_update_conflicts_with_target
        FlowKey.objects.using(self.using).bulk_create(
            [FlowKey(job_name=job_name, kind=kind, key=key)],
            update_conflicts=True,
            update_fields=["kind"],
            unique_fields=["job_name", "kind", "key"] if target else None,
        )

    def wake_time(self, woken_at: datetime) -> Any:
        """The wake time written on runs woken inside a publisher's transaction."""
        return woken_at

    def on_connect(self, connection: Any) -> None:
        """Prepare a new connection of this alias (``connection_created``)."""

    def claiming(self) -> Any:
        """The transaction a claim's pick and UPDATE share. Without row locks (SQLite)
        none: a read that later writes would fail with "database is locked" instead of
        waiting for the writer."""
        return nullcontext()

    def pick(
        self, candidates: JobRunQuerySet, limit: int, queues: list[str] | None = None
    ) -> list[tuple[Any, ...]]:
        """The ``PICKED`` values of up to ``limit`` of the best candidates (runs of
        ``queues``, or of every queue), locked where the database can lock rows."""
        return _picked(read_best(candidates.only(*PICKED), limit))

    # -- writes ------------------------------------------------------------------
    def insert_run(self, run: JobRun, arguments: Arguments | None = None) -> None:
        """Insert one new run (``enqueue``); ``arguments``, when given, are its
        arguments as checked, with their JSON text (a dialect may send that text)."""
        run.save(using=self.using, force_insert=True)

    def insert_runs(
        self, runs: list[JobRun], batch_size: int, arguments: Sequence[Arguments] | None = None
    ) -> None:
        """Insert new runs (``enqueue_many``); ``arguments`` as ``insert_run``'s, one a run."""
        JobRun.objects.using(self.using).bulk_create(runs, batch_size=batch_size)

    def pipeline(self) -> Any:
        """Where the statements inside are sent without waiting for each one's result
        (``enqueue_many``'s batches: the next is built while the server writes the
        last); elsewhere each waits as usual."""
        return nullcontext()

    def insert_steps(
        self, names: tuple[str, ...], rows: Sequence[Sequence[Any]], owners: Sequence[str]
    ) -> set[tuple[str, str]] | None:
        """Insert new step records, each fenced by its run's lease, in one statement (the
        (run id, name) written); None where the dialect writes them one by one."""
        return None

    def execute_fenced(
        self, name: str, sql: str, values: Sequence[tuple[Any, Any]], types: list[str]
    ) -> int:
        """Run the statement ``name``, written with ``$1``... placeholders (``types``:
        their database types), with ``values`` (each a model field and its value, in
        the placeholders' numbers); returns the rows it wrote."""
        connection = connections[self.using]
        params = [prepared(field, value, connection) for field, value in values]
        positional, order = numbered(sql)
        with connection.cursor() as cursor:
            cursor.execute(positional, [params[index] for index in order])
            return int(cursor.rowcount)

    def finish_concurrency(self, finish: Finish, now: datetime) -> bool | None:
        """Record ``finish``, the outcome of a run under a concurrency limit, and free
        its slot, in one call; None where the dialect has no such call
        (``recording.write`` then does it in a transaction of its own)."""
        return None

    def lock_waiting(self, runs: JobRunQuerySet) -> list[Any]:
        """The ids of ``runs`` that wait (a publisher's or a sender's wake-up, in the
        caller's transaction), locked until it ends (``SKIP LOCKED``): a run another
        transaction holds is skipped, and no other run is left locked."""
        waiting = runs.filter(status=RunStatus.WAITING).order_by()
        return list(waiting.select_for_update(skip_locked=True).values_list("id", flat=True))

    def latest(self, rows: JobRunQuerySet) -> JobRunQuerySet:
        """``rows`` read as last committed, inside a transaction that holds a lock."""
        return rows

    def write_first(self) -> None:
        """Take the database's write lock before a transaction reads what it will
        write (SQLite only; elsewhere row locks do this)."""

    def purge_batch(self, batch: Batch) -> Purged:
        """Delete one batch of a purge (``db/purge.py``) in a transaction of its own:
        statement by statement, the ORM's way."""
        return delete_batch(self.using, batch, self.write_first)

    def cut_connection(self) -> None:
        """End this process's session from the server side (fault injection); where
        that cannot be done the caller raises alone."""

    # -- operators' reads ----------------------------------------------------------

    def estimate(self, rows: QuerySet[Any, Any]) -> int:
        """How many rows ``rows`` has by the planner's statistics, read without
        touching a row (``observe/counts.py``), where ``estimates``; elsewhere exact."""
        return rows.count()

    def oldest_due(self, rows: QuerySet[Any, Any], now: datetime) -> datetime | None:
        """The earliest wake time at or before ``now`` of the runnable ``rows`` (the
        oldest runnable run's): one aggregate, a range of MariaDB's and MySQL's index
        on status then wake time; SQLite's tables are expected to stay small."""
        runnable = rows.filter(status__in=RUNNABLE, wake_at__lte=now).order_by()
        oldest: datetime | None = runnable.aggregate(w=Min("wake_at"))["w"]
        return oldest


class SQLite(Dialect):
    wake_by = "data_version"
    late_wake = "nobody"
    now_sql = "SELECT strftime('%Y-%m-%d %H:%M:%f', 'now')"
    clock_resolution = timedelta(milliseconds=1)

    def on_connect(self, connection: Any) -> None:
        # Several worker processes share one file: WAL lets readers run beside the
        # writer, and a busy timeout makes writers wait instead of failing.
        with connection.cursor() as cursor:
            cursor.execute("PRAGMA journal_mode=WAL")
            cursor.execute("PRAGMA busy_timeout=30000")

    def claiming(self) -> Any:
        return _lazy_commit(self.using)

    def write_first(self) -> None:
        # SQLite cannot turn a read transaction into a write one while another process
        # writes ("database is locked" at once, not after the busy timeout): a write
        # that changes nothing takes the write lock before the transaction reads.
        Schedule.objects.using(self.using).filter(pk=-1).update(note="")


@contextmanager
def _lazy_commit(using: str) -> Iterator[None]:
    """A claim that is a transaction of its own commits without waiting for the disk,
    as on PostgreSQL (``synchronous_commit`` off): ``synchronous=NORMAL`` for its
    statements, then the connection's own level again. In WAL mode its commit is
    appended to the log without an fsync, and the next commit that waits (an outcome,
    a step's record, of any connection) syncs the log, the claim with it. A power loss
    before that can lose the claim, not more: the run is queued as it was, the worker's
    next write for it, fenced by its lease, is refused, and it is claimed again. A
    connection set to ``NORMAL`` or ``OFF`` already is left as it is."""
    connection = connections[using]
    if connection.in_atomic_block:
        yield
        return
    connection.ensure_connection()
    raw = connection.connection  # the driver's: Django's cursor costs more than these
    with connection.wrap_database_errors:
        level = int(raw.execute("PRAGMA synchronous").fetchone()[0])
        if level >= _FULL:
            raw.execute("PRAGMA synchronous=NORMAL")
    if level < _FULL:
        yield
        return
    try:
        yield
    finally:
        with connection.wrap_database_errors:
            raw.execute(f"PRAGMA synchronous={level}")


#: SQLite's ``synchronous`` levels: OFF 0, NORMAL 1, FULL 2 (its default), EXTRA 3.
_FULL = 2


class Locking(Dialect):
    """Databases with row locks and ``SKIP LOCKED``."""

    def claiming(self) -> Any:
        return transaction.atomic(using=self.using)

    def pick(
        self, candidates: JobRunQuerySet, limit: int, queues: list[str] | None = None
    ) -> list[tuple[Any, ...]]:
        locking = candidates.only(*PICKED).select_for_update(skip_locked=True)
        return _picked(read_best(locking, limit))


def _picked(runs: Iterable[JobRun]) -> list[tuple[Any, ...]]:
    return [(run.id, run.status, run.started_at) for run in runs]


class MySQL(Locking):
    wake_by = "doorbell"
    late_wake = "worker"
    now_sql = "SELECT UTC_TIMESTAMP(6)"

    def pick(
        self, candidates: JobRunQuerySet, limit: int, queues: list[str] | None = None
    ) -> list[tuple[Any, ...]]:
        """Lock up to ``limit`` of the best runnable runs.

        The claim's indexes lead with ``status`` here (``schema.PartialIndex``: no
        partial indexes), so a read of the three runnable statuses sorts what it reads
        (``models.best`` reads them one by one and merges), and a sorting ``FOR
        UPDATE`` locks every row it sorted: a concurrent worker, skipping locked rows,
        would find nothing. So the best runs are shortlisted by a read without locks,
        then locked by primary key alone (no other condition that could lead the
        database to another index), no more at a time than are still wanted; rows
        another worker holds are skipped and the next ones tried. A run taken
        meanwhile is dropped here by its status; the claim's guarded UPDATE checks
        the rest.
        """
        shortlist = best(  # claims.claim_unlimited's: no run under a limit
            candidates.only("id", "priority", "wake_at"),
            limit + SHORTLIST_SPARE,
            limited=False,
            queues=queues,
        )
        ids = [run.id for run in shortlist]
        by_id = JobRun.objects.using(self.using).order_by()
        picked: list[tuple[Any, ...]] = []
        while ids and len(picked) < limit:
            wanted = limit - len(picked)
            chunk, ids = ids[:wanted], ids[wanted:]
            locked = by_id.filter(pk__in=chunk).select_for_update(skip_locked=True)
            picked += [row for row in locked.values_list(*PICKED) if row[1] in RUNNABLE]
        return picked

    def lock_waiting(self, runs: JobRunQuerySet) -> list[Any]:
        """Read the waiting runs' ids without locks, then lock those by primary key.

        A locking read of ``runs`` locks every run row it reads on the way, not only
        those it returns: when the plan reads the step records first (``EXISTS``, made
        a semi-join), the row of a run that has recorded its wait and is still running
        stays locked to the end of the caller's transaction, and that run's worker,
        parking it, waits for the caller's commit (``lock_wait_timeout``). By primary
        key, a row that no longer waits is unlocked as soon as it is read (READ
        COMMITTED, Django's level for MySQL).
        """
        ids = list(runs.filter(status=RunStatus.WAITING).order_by().values_list("id", flat=True))
        if not ids:
            return []
        by_id = JobRun.objects.using(self.using).order_by()
        locked = by_id.filter(pk__in=ids, status=RunStatus.WAITING).select_for_update(
            skip_locked=True
        )
        return list(locked.values_list("id", flat=True))

    def latest(self, rows: JobRunQuerySet) -> JobRunQuerySet:
        # A plain read in the caller's transaction may see a snapshot taken before the
        # lock was granted (REPEATABLE READ).
        return rows.select_for_update()
