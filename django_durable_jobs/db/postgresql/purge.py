"""A batch of a purge on PostgreSQL: ``purge_batch`` of ``sql/queries.sql``, one
statement and one round trip (``db/purge.py`` says which runs a batch takes)."""

from __future__ import annotations

from datetime import UTC, datetime
from functools import cache
from typing import Any

from django.db import connections, transaction

from ...models import FINISHED, JobRun
from ..purge import OWNED, Batch, Purged
from . import sql

#: ``after`` of a first batch: before any run finished.
BEGINNING = datetime(1, 1, 1, tzinfo=UTC)


@cache
def statement(using: str) -> str:
    """``purge_batch`` with the tables' names: one ``DELETE`` a table of ``OWNED``."""
    qn = connections[using].ops.quote_name
    owned = "\n".join(
        f"{model._meta.model_name} AS (DELETE FROM {qn(model._meta.db_table)} "
        "WHERE run_id IN (SELECT id FROM batch)),"
        for model in OWNED
    )
    return sql.sections("queries")["purge_batch"].format(
        runs=qn(JobRun._meta.db_table), owned=owned
    )


def delete_batch(using: str, batch: Batch) -> Purged:
    """One batch, in a transaction of its own."""
    params: dict[str, Any] = {
        "status": batch.status,
        "cutoff": batch.cutoff,
        "after": batch.after or BEGINNING,
        "finished": [str(status) for status in FINISHED],
        "limit": batch.limit,
    }
    with transaction.atomic(using=using), connections[using].cursor() as cursor:
        cursor.execute(statement(using), params)
        count, reached = cursor.fetchone()
    return Purged(int(count), reached)
