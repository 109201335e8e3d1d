"""In-memory implementations of the engine's seams: for tests and inline runs."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from datetime import datetime
from typing import Any

from .clock import Clock, SystemClock
from .records import ChildOutcome, Committed, EventHit, RecordedStep
from .serialization import roundtrip


class MemoryStepStore:
    """A ``StepStore`` in a dict: for tests and for running jobs inline."""

    def __init__(self) -> None:
        self._runs: dict[str, dict[str, RecordedStep]] = {}

    def get(self, run_id: str, name: str) -> RecordedStep | None:
        return self._runs.get(run_id, {}).get(name)

    def put(self, record: RecordedStep) -> None:
        self._runs.setdefault(record.run_id, {})[record.name] = record

    def list(self, run_id: str) -> Sequence[RecordedStep]:
        return list(self._runs.get(run_id, {}).values())  # dicts keep first-insert order

    def delete(self, run_id: str, name: str) -> None:
        self._runs.get(run_id, {}).pop(name, None)

    def clear(self, run_id: str) -> None:
        self._runs.pop(run_id, None)

    def atomic(self) -> AbstractContextManager[Any]:
        return nullcontext()

    @contextmanager
    def step_transaction(self) -> Iterator[Committed]:
        """No database: the record put inside stays whether the block raises or not,
        which the engine never lets happen (it puts the record last)."""
        done = Committed()
        yield done
        done.committed = True


class MemoryEventLog:
    """An ``EventLookup`` over a list, with ``publish`` for tests."""

    def __init__(self, clock: Clock | None = None) -> None:
        self._clock = clock or SystemClock()
        self._events: list[tuple[str, str | None, Any, datetime]] = []

    def publish(self, event: str, payload: Any = None, *, key: str | None = None) -> int:
        self._events.append((event, key, roundtrip(payload), self._clock.now()))
        return len(self._events)

    def cursor(self, event: str | None = None, key: str | None = None) -> int:
        # One process, no transactions: the list is already in commit order.
        return len(self._events)

    def find(self, event: str, key: str | None, after: int) -> EventHit | None:
        for position, (name, event_key, payload, at) in enumerate(self._events, start=1):
            if position > after and name == event and (key is None or event_key == key):
                return EventHit(position, payload, at)
        return None


class MemoryChildRuns:
    """``ChildRuns`` for tests: children are started once per parent step and finish
    when the test says so (``finish``)."""

    def __init__(self) -> None:
        self.started: dict[str, tuple[Any, tuple[Any, ...], dict[str, Any]]] = {}
        self._by_step: dict[tuple[str, str], str] = {}
        self._outcomes: dict[str, ChildOutcome] = {}

    def start(
        self, parent_run_id: str, step: str, job: Any, args: Sequence[Any], kwargs: dict[str, Any]
    ) -> str:
        key = (parent_run_id, step)
        if key not in self._by_step:
            child = f"{parent_run_id}/{step}"
            self._by_step[key] = child
            self.started[child] = (job, tuple(args), dict(kwargs))
        return self._by_step[key]

    def finish(self, child_run_id: str, outcome: ChildOutcome) -> None:
        self._outcomes[child_run_id] = outcome

    def outcome(self, child_run_id: str) -> ChildOutcome | None:
        return self._outcomes.get(child_run_id)
