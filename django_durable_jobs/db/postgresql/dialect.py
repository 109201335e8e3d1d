"""PostgreSQL's dialects: ``Postgres`` (psycopg2: the ORM's claims and flow control,
with ``FOR UPDATE SKIP LOCKED``) and ``Psycopg`` (psycopg 3: the one-round-trip path of
``claims.py``: the claim that also records the previous outcome, runs inserted with
``unnest``, prepared fenced step inserts, LISTEN/NOTIFY wake-ups, the flow functions)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime, timedelta
from typing import Any

from django.db import connections
from django.db.models import DateTimeField, Func, QuerySet, Value
from django.db.models.functions import Least

from ...engine.serialization import Arguments
from ...models import JobRun
from ..executable import Executable
from ..orm_dialect import Locking
from ..paused import Paused
from ..purge import Batch, Purged
from . import claims as postgres
from . import flow as postgres_flow
from . import inserts as postgres_inserts
from . import operators, statements
from . import purge as postgres_purge

#: The start of the current transaction (``now()``).
TRANSACTION_START = Func(template="transaction_timestamp()", output_field=DateTimeField())


class Postgres(Locking):
    """psycopg2: the ORM's claims and flow control, with ``FOR UPDATE SKIP LOCKED``."""

    # now() is the transaction's start; clock_timestamp() is the real time.
    now_sql = "SELECT clock_timestamp()"
    estimates = True

    def lock_key(self, job_name: str, kind: str, key: str) -> None:
        # A transaction-level advisory lock (``durable_flow_lock``), the lock the flow
        # functions take too: no row to write.
        postgres_flow.lock(self.using, job_name, kind, key)

    def wake_time(self, woken_at: datetime) -> Any:
        # The transaction's start (``now()``) if the clock is not earlier: the trigger
        # that notifies idle workers compares wake times with it.
        return Least(TRANSACTION_START, Value(woken_at, output_field=DateTimeField()))

    def purge_batch(self, batch: Batch) -> Purged:
        return postgres_purge.delete_batch(self.using, batch)

    def cut_connection(self) -> None:
        with connections[self.using].cursor() as cursor:  # raises: the server ends it
            cursor.execute("SELECT pg_terminate_backend(pg_backend_pid())")

    def estimate(self, rows: QuerySet[Any, Any]) -> int:
        return operators.planned_rows(self.using, rows)

    def oldest_due(self, rows: QuerySet[Any, Any], now: datetime) -> datetime | None:
        return operators.oldest_due(rows, now)


class Psycopg(Postgres):
    fused = True
    listens = True
    wake_by = "listen"
    late_wake = "worker"

    def claim_concurrency(
        self,
        owner: str,
        now: datetime,
        lease: timedelta,
        queues: list[str] | None,
        limit: int,
        candidates: int,
        finishes: Sequence[postgres.Finish],
        only: Executable | None = None,
        paused: Paused | None = None,
    ) -> tuple[list[JobRun], frozenset[Any], bool] | None:
        return postgres_flow.claim_concurrency(
            self.using, owner, now, lease, queues, limit, candidates, finishes, only, paused
        )

    def finish_concurrency(self, finish: postgres.Finish, now: datetime) -> bool | None:
        return finish.run_id in postgres_flow.finish_concurrency(self.using, [finish], now)

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
        return postgres.claim(
            self.using, owner, now, lease, queues, limit, only=only, paused=paused
        ).runs

    def insert_run(self, run: JobRun, arguments: Arguments | None = None) -> None:
        postgres_inserts.insert_run(self.using, run, arguments)

    def insert_runs(
        self, runs: list[JobRun], batch_size: int, arguments: Sequence[Arguments] | None = None
    ) -> None:
        postgres_inserts.insert_runs(self.using, runs, batch_size, arguments)

    @contextmanager
    def pipeline(self) -> Iterator[None]:
        """psycopg 3's pipeline mode: the batches' INSERTs go out as they are built and
        are answered at the end (one Sync: in autocommit, one implicit transaction).
        An error is raised as Django's own, as a statement's would be."""
        connection = connections[self.using]
        connection.ensure_connection()
        if not hasattr(connection.connection, "pipeline"):  # psycopg2
            yield
            return
        with connection.wrap_database_errors, connection.connection.pipeline():
            yield

    def insert_steps(
        self, names: tuple[str, ...], rows: Sequence[Sequence[Any]], owners: Sequence[str]
    ) -> set[tuple[str, str]] | None:
        return postgres_inserts.insert_steps(self.using, names, rows, owners)

    def execute_fenced(
        self, name: str, sql: str, values: Sequence[tuple[Any, Any]], types: list[str]
    ) -> int:
        # Planning a small INSERT costs as much as running it: prepared once per
        # connection (unless a transaction pooler forbids named statements). A prepared
        # statement's parameters have their types, so values are sent as they are where
        # Django would not change them (``postgres_inserts.prepared_params``); as text,
        # through Django (an INSERT ... SELECT of untyped literals would read them as text).
        connection = connections[self.using]
        if statements.prepare(connection, name, types, sql):
            params = postgres_inserts.prepared_params(values, connection)
        else:
            params = [field.get_db_prep_save(value, connection) for field, value in values]
        return statements.run_statement(connection, name, types, sql, params, prepared=True)
