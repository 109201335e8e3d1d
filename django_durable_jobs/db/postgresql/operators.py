"""The operators' figures where PostgreSQL reads them differently (``observe/``).

**Estimates.** Row counts by the planner's statistics: what ``EXPLAIN`` expects a
query to return.

Counting millions of rows reads millions of index entries (``count(*)`` of the 10
million finished runs of benchmarks/scale.py takes seconds); the planner's estimate
costs one plan. It is the table's size (``pg_class.reltuples``, scaled to the pages
the table has now) times the selectivity of the filter, from the column statistics
that ANALYZE (autovacuum's, or ``migrate``'s for the statistics object
``durable_run_queue_status``) last gathered. It lags a burst of writes until the next
ANALYZE; ``observe/counts.py`` uses it only above the count it makes exactly.

**The oldest due run.** ``min(wake_at)`` of the runnable runs due by now reads every
due entry of the claim's index ``durable_run_runnable_all`` (priority first, then
wake time): 100,000 entries, 150 ms, behind a backlog of 100,000 runs. Per priority
the first due entry is the oldest, so ``oldest_due`` walks the priorities (one index
descent each) and takes each one's first: two descents per priority in use.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from django.db import connections
from django.db.models import QuerySet

from ...models import RUNNABLE


def planned_rows(using: str, rows: QuerySet[Any, Any]) -> int:
    """The rows the planner expects ``rows`` (a filter, not an aggregate) to return."""
    sql, params = rows.order_by().values("pk").query.get_compiler(using).as_sql()
    with connections[using].cursor() as cursor:
        cursor.execute(f"EXPLAIN (FORMAT JSON) {sql}", params)
        (plan,) = cursor.fetchone()
    if isinstance(plan, str | bytes):  # psycopg2 without its JSON adapter for EXPLAIN
        plan = json.loads(plan)
    return int(plan[0]["Plan"]["Plan Rows"])


def oldest_due(rows: QuerySet[Any, Any], now: datetime) -> datetime | None:
    """The earliest wake time at or before ``now`` among the runnable ``rows``."""
    runnable = rows.filter(status__in=RUNNABLE).order_by()
    oldest: datetime | None = None
    below: int | None = None
    while True:
        after = runnable if below is None else runnable.filter(priority__lt=below)
        found = list(after.order_by("-priority").values_list("priority", flat=True)[:1])
        if not found:
            return oldest
        below = found[0]
        due = (
            runnable.filter(priority=below, wake_at__lte=now)
            .order_by("wake_at")
            .values_list("wake_at", flat=True)[:1]
        )
        for wake_at in due:
            oldest = wake_at if oldest is None else min(oldest, wake_at)
