"""Counts that stay cheap at any table size: exact up to ``EXACT_UP_TO``, an estimate
above it where the database has one (PostgreSQL: ``db/postgresql/estimates.py``).

``count(*)`` reads every row (or index entry) it counts: the runs by status of a
table of 10 million finished and a million parked runs took over a second. So a
count first reads at most ``EXACT_UP_TO + 1`` rows; under that it is exact, at or
above it the planner's estimate is shown instead, marked as one (``≈`` on the
dashboard, ``estimates`` in ``jobs stats --json``). MariaDB, MySQL and SQLite count
exactly at every size: InnoDB's and SQLite's estimates are too rough to show, and
their tables are expected to stay smaller (docs/how-to/operating.md).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

from django.db.models import Count, QuerySet

from ..db import dialect
from ..models import RUNNABLE, JobRun, RunStatus

#: Counts up to this are exact everywhere; above it PostgreSQL's are estimates.
EXACT_UP_TO = 10_000
#: Statuses a run waits or works in: the queue depth counts them.
PENDING = (*RUNNABLE, RunStatus.RUNNING)
#: Queues whose runs are estimated per status, at most (the first, by name).
MOST_QUEUES = 100
#: (priority, queue) pairs of runnable runs read to find those queues, at most.
MOST_PAIRS = 1_000


@dataclass(frozen=True)
class Counted:
    n: int
    exact: bool = True


def estimates(using: str) -> bool:
    """True where counts above ``EXACT_UP_TO`` are estimated (PostgreSQL)."""
    return dialect.of(using).estimates


def count(rows: QuerySet[Any, Any], using: str) -> Counted:
    """How many rows ``rows`` has: exact up to ``EXACT_UP_TO`` (everywhere), above it
    the planner's estimate where the database has one (never below what was seen)."""
    rows = rows.using(using).order_by()
    if not estimates(using):
        return Counted(rows.count())
    seen = rows[: EXACT_UP_TO + 1].count()
    if seen <= EXACT_UP_TO:
        return Counted(seen)
    return Counted(max(dialect.of(using).estimate(rows), seen), exact=False)


def by_status(using: str) -> tuple[dict[str, int], list[str]]:
    """Runs per status, every status (zeros included); and the statuses estimated.
    Where nothing is estimated, one grouped count; on PostgreSQL one bounded count
    per status (an index range of ``durable_run_finished``), and a plan for each
    status above ``EXACT_UP_TO``."""
    counts = dict.fromkeys(RunStatus.values, 0)
    runs = JobRun.objects.using(using).order_by()
    if not estimates(using):
        for status, n in runs.values_list("status").annotate(n=Count("*")):
            counts[status] = n
        return counts, []
    estimated = []
    for status in RunStatus.values:
        # Only the status read: an index-only range of ``durable_run_finished``.
        counted = count(runs.filter(status=status).values("status"), using)
        counts[status] = counted.n
        if not counted.exact:
            estimated.append(status)
    return counts, estimated


def depth(using: str, estimated: Collection[str]) -> tuple[dict[str, dict[str, int]], list[str]]:
    """queue -> {status: runs} of the unfinished runs, queues by name; and the
    ``queue.status`` pairs estimated. ``estimated`` names the statuses whose totals
    were (``by_status``); the others are counted in one grouped query, of at most
    ``EXACT_UP_TO`` runs per status. For the estimated ones, each queue that holds
    runnable runs (found one index descent per priority it has, ``MOST_QUEUES`` at
    most) is counted exactly when it holds at most ``EXACT_UP_TO`` runnable runs,
    else estimated."""
    runs = JobRun.objects.using(using).order_by()
    found: dict[str, dict[str, int]] = defaultdict(lambda: dict.fromkeys(PENDING, 0))
    big = [s for s in PENDING if s in estimated and s in RUNNABLE]
    exact = [s for s in PENDING if s not in big]
    rows = runs.filter(status__in=exact).values_list("queue", "status").annotate(n=Count("*"))
    for queue, status, n in rows:
        found[queue][status] = n
    pairs, planner = [], dialect.of(using)
    for queue, priorities in _runnable_queues(runs).items() if big else []:
        # Index-only, in the claim's partial index: the queue's runnable runs of each
        # priority it has, bounded.
        runnable = runs.filter(queue=queue, priority__in=priorities, status__in=RUNNABLE)
        if _at_most(runnable, priorities, EXACT_UP_TO + 1) <= EXACT_UP_TO:
            small = runnable.filter(status__in=big).values_list("status").annotate(n=Count("*"))
            for status, n in small:
                found[queue][status] = n
            continue
        for status in big:
            found[queue][status] = planner.estimate(runs.filter(queue=queue, status=status))
            pairs.append(f"{queue}.{status}")
    return dict(sorted(found.items())), pairs


def _at_most(runnable: QuerySet[Any, Any], priorities: list[int], most: int) -> int:
    """How many of ``runnable`` there are, up to ``most``: a bounded range of the
    claim's index per priority."""
    seen = 0
    for priority in priorities:
        seen += runnable.filter(priority=priority).values("pk")[: most - seen].count()
        if seen >= most:
            break
    return seen


def _runnable_queues(runs: QuerySet[Any, Any]) -> dict[str, list[int]]:
    """The queues of the runnable runs (the first ``MOST_QUEUES`` by name), each with
    the priorities its runnable runs have. Each (priority, queue) is the first entry
    after the last in the claim's index ``durable_run_runnable`` (priority, then
    queue): one index descent each, ``MOST_PAIRS`` at most, not a scan of the runs."""
    ordered = runs.filter(status__in=RUNNABLE).order_by("-priority", "queue")
    entries = ordered.values_list("priority", "queue")
    found: dict[str, list[int]] = defaultdict(list)
    step = list(entries[:1])
    for _ in range(MOST_PAIRS):
        if not step:
            break
        priority, queue = step[0]
        found[queue].append(priority)
        step = list(entries.filter(priority=priority, queue__gt=queue)[:1])
        step = step or list(entries.filter(priority__lt=priority)[:1])
    return dict(sorted(found.items())[:MOST_QUEUES])
