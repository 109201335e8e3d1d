"""What the step engine reads and writes, and the seams it talks through.

No Django here: the ORM implementations live in ``db/store.py``, the in-memory ones
in ``memory.py``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

from .serialization import ErrorInfo
from .vocabulary import StepKind, StepStatus


@dataclass(frozen=True, kw_only=True)
class RecordedStep:
    """One step of one run, as stored."""

    run_id: str
    name: str
    status: StepStatus
    started_at: datetime
    attempts: int
    #: The memoized value; meaningful only when ``status`` is completed.
    output: Any = None
    completed_at: datetime | None = None
    #: When a sleeping or waiting step becomes runnable.
    wake_at: datetime | None = None
    event: str | None = None
    #: A wait's event key (None: any key); a publish step's key.
    correlation_key: str | None = None
    #: The run an ``invoke`` step started (its id as text).
    child: str | None = None
    #: Events committed after this cursor (``EventLookup.cursor``) count for a waiting step.
    event_cursor: int | None = None
    error: ErrorInfo | None = None
    #: What made the step: "run", "sleep", "wait", "publish" or "invoke".
    kind: StepKind = StepKind.RUN
    #: When a wait or an invoke gives up (its timeout from the first start).
    deadline: datetime | None = None
    #: When the step's latest execution began (``started_at`` is its first, for
    #: deadlines): what "took" is measured from after a retry. None: as ``started_at``.
    last_started_at: datetime | None = None


class StepStore(Protocol):
    """Where step records live: in memory for tests, the ORM in production."""

    def get(self, run_id: str, name: str) -> RecordedStep | None: ...
    def put(self, record: RecordedStep) -> None: ...
    def list(self, run_id: str) -> Sequence[RecordedStep]:
        """The run's records in the order each step first ran."""
        ...

    def delete(self, run_id: str, name: str) -> None: ...
    def clear(self, run_id: str) -> None: ...
    def atomic(self) -> AbstractContextManager[Any]:
        """Writes inside commit together (a step that publishes an event)."""
        ...

    def step_transaction(self) -> AbstractContextManager[Committed]:
        """The transaction of an atomic step (``step.atomic``): the writes inside, the
        step's record included, commit together when the block ends, only while this
        worker holds the run's lease, and none of them if it raises. Writes through
        another database are refused inside it. The value says, once the block ended,
        whether the transaction committed."""
        ...


class Committed:
    """Whether a step's transaction committed (``StepStore.step_transaction``)."""

    def __init__(self) -> None:
        self.committed = False


@dataclass(frozen=True)
class EventHit:
    position: int
    payload: Any
    published_at: datetime


class EventLookup(Protocol):
    """The slice of the event log a waiting step needs.

    Cursors order events as the database committed them, so "published after
    the wait started" never compares clocks of different machines, nor ids that
    were handed out before their transactions committed.
    """

    def cursor(self, event: str | None = None, key: str | None = None) -> int:
        """A cursor for a wait on ``event`` (with ``key``; both None: every event):
        events committed now are at or before it, events committed later after it."""
        ...

    def find(self, event: str, key: str | None, after: int) -> EventHit | None:
        """The first event named ``event`` (with ``key``, if given) committed after
        the cursor ``after``."""
        ...

    def publish(self, event: str, payload: Any = None, *, key: str | None = None) -> int:
        """Publish an event; returns its position."""
        ...


@dataclass(frozen=True)
class ChildOutcome:
    """How a child run finished."""

    succeeded: bool
    result: Any = None
    error: ErrorInfo | None = None


class ChildRuns(Protocol):
    """Starting child runs and reading how they finished (``step.invoke``)."""

    def start(
        self, parent_run_id: str, step: str, job: Any, args: Sequence[Any], kwargs: dict[str, Any]
    ) -> str:
        """Start (once per parent step, however often replayed) and return its id."""
        ...

    def outcome(self, child_run_id: str) -> ChildOutcome | None:
        """None while the child has not finished."""
        ...


@dataclass(frozen=True)
class Call:
    """One child run of a fan-out: ``job.call(*args, **kwargs)``."""

    job: Any  #: a ``JobDefinition`` or a job name
    args: tuple[Any, ...] = ()
    kwargs: Mapping[str, Any] = field(default_factory=dict)

    @property
    def job_name(self) -> str:
        return str(getattr(self.job, "name", self.job))


class ChildBatches(Protocol):
    """Starting a fan-out's children and reading how they finished."""

    def start_all(self, parent_run_id: str, step: str, calls: Sequence[Call]) -> list[str]:
        """Start one child per call (once, however often replayed); their ids, in order."""
        ...

    def outcomes(
        self, parent_run_id: str, step: str, ids: Sequence[str]
    ) -> list[ChildOutcome | None]:
        """How each child finished (None while it has not), in the order of ``ids``."""
        ...


__all__ = [
    "Call",
    "ChildBatches",
    "ChildOutcome",
    "ChildRuns",
    "EventHit",
    "EventLookup",
    "RecordedStep",
    "StepKind",
    "StepStatus",
    "StepStore",
]
