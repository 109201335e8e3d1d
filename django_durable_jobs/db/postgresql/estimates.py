"""Row counts by the planner's statistics: what ``EXPLAIN`` expects a query to return.

Counting millions of rows reads millions of index entries (``count(*)`` of the 10
million finished runs of benchmarks/scale.py takes seconds); the planner's estimate
costs one plan. It is the table's size (``pg_class.reltuples``, scaled to the pages
the table has now) times the selectivity of the filter, from the column statistics
that ANALYZE (autovacuum's, or ``migrate``'s for the statistics object
``durable_run_queue_status``) last gathered. It lags a burst of writes until the next
ANALYZE; ``observe/counts.py`` uses it only above the count it makes exactly.
"""

from __future__ import annotations

import json
from typing import Any

from django.db import connections
from django.db.models import QuerySet


def planned_rows(using: str, rows: QuerySet[Any, Any]) -> int:
    """The rows the planner expects ``rows`` (a filter, not an aggregate) to return."""
    sql, params = rows.order_by().values("pk").query.get_compiler(using).as_sql()
    with connections[using].cursor() as cursor:
        cursor.execute(f"EXPLAIN (FORMAT JSON) {sql}", params)
        (plan,) = cursor.fetchone()
    if isinstance(plan, str | bytes):  # psycopg2 without its JSON adapter for EXPLAIN
        plan = json.loads(plan)
    return int(plan[0]["Plan"]["Plan Rows"])
