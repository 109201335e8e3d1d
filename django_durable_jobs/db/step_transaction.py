"""The transaction of an atomic step (``ctx.step.atomic``): the step function's writes
to the jobs database and the step's record commit together, or neither does.

Three things make that exact:

- The record is written last, fenced like every step write (only while this worker
  holds the run's lease), in a statement that also locks the run's row (``FOR
  UPDATE``; SQLite's one write lock is held from the transaction's start): a worker
  taking the run over waits for this commit, then reads the record; if it took the
  run first, the fence refuses the record and everything rolls back.
- A write through another database alias would commit on its own, outside the
  step's transaction: it is refused before it reaches that database
  (``StepUsageError``), and the step rolls back even if the function caught it.
- The record's follow-ups (the ``step_completed`` signal, the store's knowledge that
  the row exists) wait for the commit: a rolled-back record never existed.

Fault points (``faults.py``): ``atomic.before`` (the transaction is open, the function
not called), ``atomic.before_record`` (the function returned), ``atomic.before_commit``
(the record is written), ``atomic.committed``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from typing import Any, Protocol

from django.db import connections, transaction

from ..engine.records import Committed, RecordedStep
from ..exceptions import StepUsageError
from . import dialect, faults


class _Store(Protocol):
    """What of ``store.OrmStepStore`` the transaction drives."""

    using: str
    in_step: StepTransaction | None

    def forget(self, record: RecordedStep) -> None: ...
    def recorded(self, record: RecordedStep) -> None: ...


#: The first word of a statement that only reads, or controls the transaction.
_READS = frozenset(
    {"SELECT", "SHOW", "EXPLAIN", "DESCRIBE", "PRAGMA", "SAVEPOINT", "RELEASE", "ROLLBACK"}
    | {"BEGIN", "COMMIT", "SET"}
)
#: A write inside a statement that starts with ``WITH``.
_WRITES = re.compile(r"\b(INSERT|UPDATE|DELETE|MERGE|REPLACE|TRUNCATE)\b", re.IGNORECASE)


def writes(sql: str) -> bool:
    """Whether a statement may write: anything but a read, a ``WITH`` of reads, or
    transaction control."""
    text = sql.lstrip().lstrip("(").lstrip()
    head = text.split(None, 1)[0].upper() if text else ""
    if head == "WITH":
        return bool(_WRITES.search(text))
    return head not in _READS


class StepTransaction(Committed):
    """One atomic step's transaction: what it refused, and the records it wrote."""

    def __init__(self, using: str) -> None:
        super().__init__()
        self.using = using
        self.refused = ""
        self.records: list[RecordedStep] = []

    def refuse_writes(self, alias: str) -> Callable[..., Any]:
        """An ``execute_wrapper`` for the connection of ``alias``: reads pass, writes
        raise ``StepUsageError`` before they are sent."""

        def wrapper(
            execute: Callable[..., Any], sql: str, params: Any, many: bool, ctx: Any
        ) -> Any:
            if not writes(str(sql)):
                return execute(sql, params, many, ctx)
            self.refused = (
                f"a write through the database {alias!r} inside ctx.step.atomic: only the "
                f"jobs database {self.using!r} commits with the step (do it in a "
                f"ctx.step.run of its own): {str(sql)[:120]}"
            )
            raise StepUsageError(self.refused)

        return wrapper


@contextmanager
def step_transaction(store: _Store) -> Iterator[StepTransaction]:
    """``StepStore.step_transaction`` on the ORM store (see the module's docstring)."""
    using = store.using
    state = StepTransaction(using)
    store.in_step = state
    try:
        with ExitStack() as guards:
            for alias in connections:
                if alias != using:
                    wrapper = state.refuse_writes(alias)
                    guards.enter_context(connections[alias].execute_wrapper(wrapper))
            with transaction.atomic(using=using):
                # SQLite: the write lock first, or a read that later writes fails with
                # "database is locked" instead of waiting for another process's write.
                dialect.of(using).write_first()
                faults.hit("atomic.before", using)
                yield state
                if state.refused:  # caught by the function: the step still rolls back
                    raise StepUsageError(state.refused)
                faults.hit("atomic.before_commit", using)
    except BaseException:
        for record in state.records:
            store.forget(record)
        raise
    finally:
        store.in_step = None
    state.committed = True
    for record in state.records:
        store.recorded(record)
    faults.hit("atomic.committed", using)
