"""The writes of each run transition (the claim's, the operator's, a wake-up's), each
under the guard its ``Rule`` states once (``rules.py``), as methods of the runs'
QuerySet (``runs.JobRunQuerySet``); and the claim's order of reading (``best``)."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import Any, TypeVar

from django.db import connections, models
from django.db.models import Case, F, Func, PositiveIntegerField, Value, When
from django.db.models.functions import Coalesce

from ..db.fields import InstantField
from .rules import AGAIN, REPLAYABLE, RETRYABLE, RUNNABLE, WAKEABLE, Rule, RunStatus

#: The run model (``runs.JobRun``, which imports this module: named by the subclass).
_Run = TypeVar("_Run", bound=models.Model)


class RunTransitions(models.QuerySet[_Run, _Run]):
    """The writes of a run's transitions, for ``runs.JobRunQuerySet``."""

    def take(self, owner: str, now: datetime, lease: timedelta) -> int:
        """The claim's write: these runs, if still runnable and due at ``now``, run for
        ``owner`` until ``now + lease``. The attempt is counted for a queued run; a run
        resuming from a sleep or a wait keeps its own. The status guard makes this safe
        where rows cannot be locked (SQLite serialises writers). ``attempt`` is assigned
        before ``status``: MySQL and MariaDB evaluate SET left to right, so a CASE
        after ``status = 'running'`` would never count."""
        return self.filter(status__in=RUNNABLE, wake_at__lte=now).update(
            attempt=Case(
                When(status=RunStatus.QUEUED, then=F("attempt") + 1),
                default=F("attempt"),
                output_field=PositiveIntegerField(),
            ),
            status=RunStatus.RUNNING,
            started_at=Coalesce(F("started_at"), Value(now, output_field=InstantField())),
            lease_owner=owner,
            lease_expires_at=now + lease,
        )

    # -- transitions outside the worker: each guard is its ``Rule`` (rules.py).
    def wake(self, now: datetime) -> int:
        """``WAKEABLE`` runs become runnable at ``now`` (the operator's wake)."""
        return self.filter(WAKEABLE.q(now)).update(wake_at=now)

    def wake_waiting(self, now: datetime | Func[Any]) -> int:
        """Waiting runs become runnable at ``now``: what they wait for (an event, a child
        run) has arrived. Sleeping runs keep their sleep."""
        return self.filter(status=RunStatus.WAITING).update(wake_at=now)

    def cancel(self, values: dict[str, Any]) -> int:
        """``CANCELLABLE`` runs get ``values`` (see ``cancelled``). A runnable run drops
        its (stale) lease; a running one keeps it, so its worker's fenced writes are
        refused and it lets go of the run at its next step."""
        changed = self.filter(status__in=RUNNABLE).update(
            **values, lease_owner="", lease_expires_at=None
        )
        return changed + self.filter(status=RunStatus.RUNNING).update(**values)

    def retry(self, now: datetime, **also: Any) -> int:
        """``RETRYABLE`` runs are queued for ``now`` with their attempts counted afresh
        (``also``: more columns to set, the verb's note in ``reruns``)."""
        return self.filter(RETRYABLE.q(now)).update(**AGAIN, wake_at=now, **also)

    def replay(self, now: datetime, **also: Any) -> int:
        """``REPLAYABLE`` runs are queued for ``now`` with their attempts counted afresh
        (the caller forgets the steps to run again)."""
        return self.filter(REPLAYABLE.q(now)).update(**AGAIN, wake_at=now, **also)

    def hold(self, rule: Rule, now: datetime) -> int:
        """Write-lock the runs ``rule`` allows now, changing nothing: a verb that must
        read a run before it changes it writes first all the same (SQLite then takes
        its write lock at once instead of failing to upgrade a read)."""
        return self.filter(rule.q(now)).update(status=F("status"))


#: A QuerySet of runs, of model instances or of values.
Runs = TypeVar("Runs", bound=models.QuerySet[Any, Any])


def by_priority(runs: Runs) -> list[Runs]:
    """``runs`` (``JobRunQuerySet.runnable``) as the claim reads them where indexes are
    partial: those above the default priority, those at it, those below, each part in
    the claim's order.

    The claim's indexes keep a priority's parked runs (sleeping, waiting, delayed)
    after its due ones, and the wake time bounds an index range only under one
    priority: read at once, a claim that found fewer due runs than it wanted read every
    parked run of its queue (on PostgreSQL 50 ms behind a million). At the default
    priority, which most runs have, a part's read stops at the first parked run."""
    return [runs.filter(priority__gt=0), runs.filter(priority=0), runs.filter(priority__lt=0)]


def read_best(runs: Runs, count: int) -> Iterable[Any]:
    """Up to ``count`` of ``runs`` (model instances) in the claim's order; where indexes
    are partial, the statement of ``in_turn``."""
    if not connections[runs.db].features.supports_partial_indexes:
        return runs[:count]
    manager = runs.model._default_manager.db_manager(runs.db)
    found: Iterable[Any] = manager.raw(*in_turn(runs, count))
    return found


def in_turn(runs: Runs, count: int) -> tuple[str, list[Any]]:
    """One statement (its SQL and parameters) that reads the parts of
    ``by_priority(runs)`` in turn, each an ordered subquery of at most ``count`` rows as
    the ORM compiles it (``FOR UPDATE`` included), ``count`` rows in all: a part is read
    only while fewer were found."""
    compiled = [part[:count].query.get_compiler(runs.db).as_sql() for part in by_priority(runs)]
    sql = " UNION ALL ".join(
        f"SELECT * FROM ({part}) AS {name}"
        for (part, _), name in zip(compiled, ("above", "at", "below"), strict=True)
    )
    params = [value for _, values in compiled for value in values]
    return f"{sql} LIMIT {int(count)}", params


#: MariaDB's and MySQL's indexes of runs in the claim's order, for a claim of some
#: queues (a part a queue) and for one of every queue: (status, [queue,] concurrency
#: limit, priority descending, wake time), built by migration 0002 there only.
IN_ORDER = {True: "durable_run_unlimited_order", False: "durable_run_unlimited_order_all"}


def best(
    runs: Runs, count: int, *, limited: bool = True, queues: list[str] | None = None
) -> list[Any]:
    """The first ``count`` of ``runs`` (``JobRunQuerySet.runnable`` of ``queues``, model
    instances), in the claim's order; ``limited=False`` where ``runs`` hold no run under
    a flow-control limit.

    Where indexes are partial (PostgreSQL, SQLite), a priority range at a time
    (``by_priority``). Where they cannot be (MariaDB, MySQL), every index of runnable
    runs also holds the finished ones under their status, and MariaDB's optimizer
    costs reading an index in the claim's order and reading the runs through their
    wake time then sorting them nearly alike: by the statistics of the day it sorted
    every due run at every claim (120 ms behind a backlog of 100,000 queued runs, 43
    ms while 100,000 sleeping runs were due at once). There, the runs under no limit
    of each runnable status (and of each of ``queues``) are read through the index in
    the claim's order (``IN_ORDER``, named with ``FORCE INDEX``), those at the default
    priority (a range that ends at the first run not yet due) apart from the others,
    each part stopping after ``count``; the runs under a limit (flow control: few at a
    time; held ones, without a wake time, are left out) in one more part, where there
    may be any (``limited``). One statement merges the parts (``_merged``).
    """
    if connections[runs.db].features.supports_partial_indexes:
        return list(read_best(runs, count))
    if queues is not None:
        queues = list(dict.fromkeys(queues))  # each queue read once
        if not queues:
            return []
    manager = runs.model._default_manager.db_manager(runs.db)
    return list(manager.raw(*_merged(runs.order_by(), count, queues, limited)))


def _merged(
    runs: Runs, count: int, queues: list[str] | None, limited: bool
) -> tuple[str, list[Any]]:
    """``best``'s statement on MariaDB and MySQL: ``runs`` compiled once by the ORM
    (its columns, its conditions, whatever filters the caller added), then a part per
    runnable status, priority range and queue written around it. Compiled part by
    part as a ``union`` of QuerySets, the thirteen parts of a claim cost more of the
    worker's Python than the database took to run them. A claim of several queues
    reads each queue on its own: through the index of every queue it read past the
    due runs of the queues it does not serve."""
    connection = connections[runs.db]
    qn = connection.ops.quote_name
    meta = runs.model._meta
    sql, params = runs.query.get_compiler(runs.db).as_sql()
    head, where, conditions = sql.partition(" WHERE ")
    if not where or not head.endswith(f" FROM {qn(meta.db_table)}"):
        raise ValueError(f"best() reads one table with a condition, not: {sql}")
    column = {
        name: f"{qn(meta.db_table)}.{qn(meta.get_field(name).column)}"
        for name in ("status", "queue", "concurrency_limit", "priority", "wake_at")
    }
    order = f"ORDER BY {column['priority']} DESC, {column['wake_at']} ASC LIMIT {int(count)}"
    through = f"{head} FORCE INDEX ({qn(IN_ORDER[queues is not None])}) WHERE ({conditions})"
    each_queue: list[list[str]] = [[]] if queues is None else [[queue] for queue in queues]
    parts, values = [], []
    for status in RUNNABLE:
        for queue in each_queue:
            for priority in ("= 0", "<> 0"):
                parts.append(
                    f"({through} AND {column['status']} = %s"
                    + (f" AND {column['queue']} = %s" if queue else "")
                    + f" AND {column['concurrency_limit']} IS NULL"
                    f" AND {column['priority']} {priority} {order})"
                )
                values += [*params, status, *queue]
    if limited:
        parts.append(
            f"({head} WHERE ({conditions}) AND {column['concurrency_limit']} IS NOT NULL {order})"
        )
        values += params
    merged = " UNION ALL ".join(parts)
    by = f"ORDER BY {qn('priority')} DESC, {qn('wake_at')} ASC LIMIT {int(count)}"
    return f"{merged} {by}", values
