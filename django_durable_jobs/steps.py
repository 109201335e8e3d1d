"""The step engine: durable, memoized steps. No Django ORM here.

Each step's result is persisted before the next step starts, so a retry replays
completed steps from storage instead of executing them again: the welcome email
is not sent twice because step 3 failed. Step names are therefore the replay key
and must be unique within an attempt (``X_STEP_DUPLICATE``).

Waiting (``sleep``, ``wait_for_event``) unwinds the run by raising
``Suspension``; the worker parks the run until ``resume_at`` instead of holding a
process. This is a port of ``seed/steps.ts``; see the README for what changed.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any, TypeVar

from . import otel
from .clock import Clock, SystemClock, aware
from .durations import Duration, after, format_duration, parse_duration
from .exceptions import (
    ChildRunFailed,
    InvalidName,
    JobTimeoutError,
    StepDuplicateError,
    StepOutputInvalid,
    Suspension,
)
from .fanout import Call, ChildBatches, calls_of, invoke_all
from .memory import MemoryChildRuns, MemoryEventLog, MemoryStepStore
from .records import (
    ChildOutcome,
    ChildRuns,
    EventHit,
    EventLookup,
    StepRecord,
    StepStatus,
    StepStore,
)
from .serialization import ErrorInfo, NotStorable, roundtrip, unstorable
from .timeouts import TimeGuard

__all__ = [
    "ChildOutcome",
    "ChildRuns",
    "EventHit",
    "EventLookup",
    "MemoryChildRuns",
    "MemoryEventLog",
    "MemoryStepStore",
    "StepLimits",
    "StepRecord",
    "StepStatus",
    "StepStore",
    "Steps",
]

T = TypeVar("T")
logger = logging.getLogger("django_durable_jobs.steps")

MAX_STEP_NAME = 200
MAX_EVENT_NAME = 200
MAX_KEY = 255
#: The error type of a step whose start is recorded and whose end is not (yet): while
#: the run is running, it is executing; otherwise its worker died inside it.
STEP_LOST = "django_durable_jobs.StepLost"
DEFAULT_WAIT_TIMEOUT = timedelta(hours=24)
DEFAULT_EVENT_POLL = timedelta(seconds=30)


@dataclass(frozen=True, kw_only=True)
class StepLimits:
    """Per-run knobs of the engine, taken from the job and the settings."""

    step_timeout: timedelta | None = None
    event_poll: timedelta = DEFAULT_EVENT_POLL
    max_output_bytes: int | None = 1_000_000


class Steps:
    """The step API a job sees as ``ctx.step``.

    >>> store, events = MemoryStepStore(), MemoryEventLog()
    >>> steps = Steps(run_id="r1", job_name="demo", store=store, events=events)
    >>> steps.run("double", lambda x: x * 2, 21)
    42
    """

    def __init__(
        self,
        *,
        run_id: str,
        job_name: str,
        store: StepStore,
        events: EventLookup,
        clock: Clock | None = None,
        limits: StepLimits | None = None,
        guard: TimeGuard | None = None,
        records: Sequence[StepRecord] | None = None,
        interrupt: Callable[[], BaseException | None] | None = None,
        children: ChildRuns | None = None,
        mark_starts: bool = False,
        batches: ChildBatches | None = None,
    ) -> None:
        """``records``: the run's records if the caller already knows them (a run that
        never started has none), saving a read. ``interrupt``: asked before each step;
        an exception it returns is raised there (a cancelled run stops at its next step).
        ``mark_starts``: record each ``run`` step's start before its function runs (one
        more write per step), so a worker that dies inside it names it (``STEP_LOST``).
        """
        self.run_id = run_id
        self.job_name = job_name
        self._store = store
        self._events = events
        self._clock = clock or SystemClock()
        self._limits = limits or StepLimits()
        self._guard = guard or TimeGuard()
        known = store.list(run_id) if records is None else records
        self._records = {record.name: record for record in known}
        self._interrupt = interrupt
        self._children = children
        self._mark_starts = mark_starts
        self._batches = batches
        self._used: list[str] = []
        self._replayed: list[str] = []

    # -- the trace -------------------------------------------------------
    @property
    def used_names(self) -> Sequence[str]:
        """Names used in this attempt, in order."""
        return tuple(self._used)

    @property
    def replayed_names(self) -> Sequence[str]:
        """Names served from storage instead of executed."""
        return tuple(self._replayed)

    # -- run -------------------------------------------------------------
    def run(self, name: str, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> Any:
        """Run ``fn(*args, **kwargs)`` once, ever, and return its stored output."""
        existing = self._begin(name)
        if existing is not None and existing.status is StepStatus.COMPLETED:
            return self._replay(existing)
        started_at = existing.started_at if existing else self._clock.now()
        attempts = (existing.attempts if existing else 0) + 1
        record = StepRecord(
            run_id=self.run_id,
            name=name,
            kind="run",
            status=StepStatus.FAILED,
            started_at=started_at,
            attempts=attempts,
        )
        if self._mark_starts:
            self._save(replace(record, error=self._lost(name, attempts)))
        began = self._clock.now()
        try:
            with self._step_limit(name), otel.step_span(name, self.run_id, attempts):
                value = fn(*args, **kwargs)
            self._check_took(name, began)
            output = self._storable(name, value)
        except (Exception, SystemExit, KeyboardInterrupt) as exc:
            # The step failed, also when it called sys.exit(): the attempt records it.
            self._save(replace(record, error=ErrorInfo.of(exc)))
            raise
        # Persist BEFORE returning: a crash one line later must not re-run this step.
        self._save(
            replace(
                record, status=StepStatus.COMPLETED, output=output, completed_at=self._clock.now()
            )
        )
        logger.info(
            "step completed: run=%s job=%s step=%r attempts=%d",
            self.run_id,
            self.job_name,
            name,
            attempts,
        )
        return output

    # -- sleep -----------------------------------------------------------
    def sleep(self, name_or_duration: str | Duration, duration: Duration | None = None) -> None:
        """``sleep("3d")`` (step named ``sleep:3d``) or ``sleep("cool-off", "3d")``."""
        if duration is None:
            duration = name_or_duration
            shown = format_duration(duration) if isinstance(duration, timedelta) else str(duration)
            name = f"sleep:{shown}"
        else:
            name = str(name_or_duration)
        delta = parse_duration(duration)
        self._sleep(name, lambda now: after(now, delta, duration))

    def sleep_until(self, name: str, when: datetime) -> None:
        """Suspend until ``when`` (an aware datetime)."""
        aware(when, f"sleep_until({name!r}) time")
        self._sleep(name, lambda now: when)

    def _sleep(self, name: str, wake_at_from: Callable[[datetime], datetime]) -> None:
        existing = self._begin(name)
        if existing is not None and existing.status is StepStatus.COMPLETED:
            self._replay(existing)
            return
        now = self._clock.now()
        if existing is not None and existing.status is StepStatus.SLEEPING and existing.wake_at:
            if existing.wake_at <= now:
                self._save(replace(existing, status=StepStatus.COMPLETED, completed_at=now))
                return
            raise Suspension(name, existing.wake_at, "sleep")
        wake_at = wake_at_from(now)
        if wake_at <= now:  # sleeping zero (or into the past) is a no-op that is still traced
            self._save(
                StepRecord(
                    run_id=self.run_id,
                    name=name,
                    kind="sleep",
                    status=StepStatus.COMPLETED,
                    started_at=now,
                    completed_at=now,
                    wake_at=wake_at,
                    attempts=1,
                )
            )
            return
        self._save(
            StepRecord(
                run_id=self.run_id,
                name=name,
                kind="sleep",
                status=StepStatus.SLEEPING,
                started_at=now,
                wake_at=wake_at,
                attempts=1,
            )
        )
        raise Suspension(name, wake_at, "sleep")

    # -- wait_for_event ----------------------------------------------------
    def wait_for_event(
        self,
        name: str,
        event: str,
        *,
        timeout: Duration = DEFAULT_WAIT_TIMEOUT,
        match: str | None = None,
        required: bool = False,
    ) -> Any:
        """Wait for the first ``event`` (with key ``match``) published after this step
        first started; return its payload, or ``None`` on timeout (``required=True``:
        fail the run with ``X_JOB_TIMEOUT``)."""
        limit = parse_duration(timeout)
        if match is not None and not isinstance(match, str):
            raise TypeError(f"wait_for_event({name!r}): match must be a str, got {match!r}")
        if not isinstance(event, str) or not event or len(event) > MAX_EVENT_NAME:
            raise InvalidName(
                f"wait_for_event({name!r}): event names are non-empty strings of at most "
                f"{MAX_EVENT_NAME} characters, got {event!r}"
            )
        if match is not None and len(match) > MAX_KEY:
            raise InvalidName(f"wait_for_event({name!r}): match is over {MAX_KEY} characters")
        for what, text in (("event", event), ("match", match)):
            if text is not None and (why := unstorable(text)) is not None:
                raise InvalidName(
                    f"wait_for_event({name!r}): {what} {text!r} cannot be stored: {why}"
                )
        existing = self._begin(name)
        if existing is not None and existing.status is StepStatus.COMPLETED:
            return self._replay(existing)
        now = self._clock.now()
        if existing is None or existing.event_cursor is None:
            started_at, cursor, attempts = now, self._events.cursor(event, match), 1
        else:
            started_at, cursor = existing.started_at, existing.event_cursor
            attempts = _executions(existing)
        record = StepRecord(
            run_id=self.run_id,
            name=name,
            kind="wait",
            status=StepStatus.WAITING,
            started_at=started_at,
            attempts=attempts,
            event=event,
            correlation_key=match,
            event_cursor=cursor,
            deadline=self._deadline(existing, now, limit, timeout),
        )
        hit = self._events.find(event, match, cursor)
        if hit is not None:
            self._save(
                replace(
                    record,
                    status=StepStatus.COMPLETED,
                    output=hit.payload,
                    completed_at=now,
                    wake_at=None,
                )
            )
            return hit.payload
        deadline = record.deadline or now
        if now >= deadline:
            return self._wait_timed_out(record, limit, required, now)
        resume_at = min(deadline, after(now, self._limits.event_poll))
        self._save(replace(record, wake_at=resume_at))
        raise Suspension(name, resume_at, "event")

    def _wait_timed_out(
        self, record: StepRecord, limit: timedelta, required: bool, now: datetime
    ) -> None:
        if required:
            error = JobTimeoutError(
                f"job {self.job_name!r} run {self.run_id}: step {record.name!r} got no "
                f"{record.event!r} event within {format_duration(limit)}"
            )
            self._save(replace(record, status=StepStatus.FAILED, error=ErrorInfo.of(error)))
            raise error
        logger.warning(
            "step %r of run %s: no %r event within %s; continuing with None",
            record.name,
            self.run_id,
            record.event,
            format_duration(limit),
        )
        self._save(replace(record, status=StepStatus.COMPLETED, output=None, completed_at=now))
        return None

    # -- publish -----------------------------------------------------------
    def publish(self, name: str, event: str, payload: Any = None, *, key: str | None = None) -> int:
        """Publish ``event`` as a step: exactly one event however often the run replays.

        The event and the step record commit together; returns the event's position.
        """
        existing = self._begin(name)
        if existing is not None and existing.status is StepStatus.COMPLETED:
            return int(self._replay(existing)["position"])
        now = self._clock.now()
        with self._guard.shield(), self._store.atomic():
            position = self._events.publish(event, payload, key=key)
            self._save(
                StepRecord(
                    run_id=self.run_id,
                    name=name,
                    kind="publish",
                    status=StepStatus.COMPLETED,
                    started_at=now,
                    completed_at=now,
                    attempts=(existing.attempts if existing else 0) + 1,
                    output={"position": position},
                    event=event,
                    correlation_key=key,
                )
            )
        return position

    # -- invoke ------------------------------------------------------------
    def invoke(
        self,
        name: str,
        job: Any,
        /,
        *args: Any,
        timeout: Duration = DEFAULT_WAIT_TIMEOUT,
        **kwargs: Any,
    ) -> Any:
        """Start a child run of ``job`` and suspend until it finishes; return its result,
        raise ``ChildRunFailed`` if it failed, ``JobTimeoutError`` after ``timeout``."""
        if self._children is None:
            raise RuntimeError("step.invoke needs child runs; this engine has none")
        limit = parse_duration(timeout)
        existing = self._begin(name)
        if existing is not None and existing.status is StepStatus.COMPLETED:
            return self._replay(existing)
        now = self._clock.now()
        deadline = self._deadline(existing, now, limit, timeout)  # before a child starts
        child = self._child(name, existing, job, args, kwargs)
        attempts = _executions(existing) if existing is not None else 1
        record = StepRecord(
            run_id=self.run_id,
            name=name,
            kind="invoke",
            status=StepStatus.WAITING,
            started_at=existing.started_at if existing else now,
            attempts=attempts,
            correlation_key=child,
            deadline=deadline,
        )
        outcome = self._children.outcome(child)
        if outcome is not None and outcome.succeeded:
            self._save(
                replace(
                    record, status=StepStatus.COMPLETED, output=outcome.result, completed_at=now
                )
            )
            return outcome.result
        if outcome is not None:
            error = ChildRunFailed(
                f"job {self.job_name!r} run {self.run_id}: step {name!r}: child run {child} "
                f"failed: {outcome.error.message if outcome.error else 'unknown error'}"
            )
            self._save(replace(record, status=StepStatus.FAILED, error=ErrorInfo.of(error)))
            raise error
        if now >= deadline:
            timed_out = JobTimeoutError(
                f"job {self.job_name!r} run {self.run_id}: step {name!r}: child run {child} "
                f"did not finish within {format_duration(limit)}"
            )
            self._save(replace(record, status=StepStatus.FAILED, error=ErrorInfo.of(timed_out)))
            raise timed_out
        resume_at = min(deadline, after(now, self._limits.event_poll))
        self._save(replace(record, wake_at=resume_at))
        raise Suspension(name, resume_at, "child")

    def _child(
        self, name: str, existing: StepRecord | None, job: Any, args: Any, kwargs: Any
    ) -> str:
        """The child run this invoke waits for: the recorded one, or a new one when none
        is recorded (a first start, or an operator's retry let go of a failed child)."""
        assert self._children is not None
        child = existing.correlation_key if existing is not None else None
        if child is None:
            with self._guard.shield():
                child = self._children.start(self.run_id, name, job, args, kwargs)
        return child

    @staticmethod
    def _deadline(
        existing: StepRecord | None, now: datetime, limit: timedelta, timeout: Duration
    ) -> datetime:
        """When a wait or an invoke gives up: recorded once, when its window opens. A
        record without one (a retry cleared it) opens a fresh window now."""
        if existing is not None and existing.deadline is not None:
            return existing.deadline
        return after(now, limit, timeout)

    # -- fan-out (fanout.py) -------------------------------------------------
    def invoke_all(
        self, name: str, calls: Sequence[Call], /, *, timeout: Duration = DEFAULT_WAIT_TIMEOUT
    ) -> list[Any]:
        """Start one child run per ``job.call(...)`` in ``calls`` and suspend until all
        finished (woken once, by the last); their results in order. If any failed,
        ``ChildRunFailed`` names the first, once all have finished.

        >>> totals = ctx.step.invoke_all("totals", [total.call(o) for o in ids])  # doctest: +SKIP
        """
        if self._batches is None:
            raise RuntimeError("step.invoke_all needs child runs; this engine has none")
        checked = calls_of(calls, f"job {self.job_name!r} step {name!r}")
        return invoke_all(self, self._batches, name, checked, parse_duration(timeout))

    def map(
        self,
        name: str,
        job: Any,
        items: Sequence[Any],
        /,
        *,
        timeout: Duration = DEFAULT_WAIT_TIMEOUT,
    ) -> list[Any]:
        """``invoke_all`` with ``job.call(item)`` for each item."""
        return self.invoke_all(name, [Call(job, (item,)) for item in items], timeout=timeout)

    # -- helpers -----------------------------------------------------------
    def _begin(self, name: str) -> StepRecord | None:
        if not isinstance(name, str) or not name or len(name) > MAX_STEP_NAME:
            raise InvalidName(
                f"job {self.job_name!r}: step names are non-empty strings of at most "
                f"{MAX_STEP_NAME} characters, got {name!r}"
            )
        if (why := unstorable(name)) is not None:
            raise InvalidName(f"job {self.job_name!r}: step name {name!r} cannot be stored: {why}")
        if self._interrupt is not None and (stop := self._interrupt()) is not None:
            raise stop
        if name in self._used:
            raise StepDuplicateError(
                f"job {self.job_name!r} run {self.run_id}: step name {name!r} is used twice "
                "in one attempt; step names are the replay key and must be unique"
            )
        self._used.append(name)
        return self._records.get(name)

    def _lost(self, name: str, attempts: int) -> ErrorInfo:
        return ErrorInfo(
            type=STEP_LOST,
            message=(
                f"step {name!r} started (its attempt {attempts}) and recorded no outcome: "
                "unless the run is running, its worker died inside it (killed, crashed, or "
                "out of memory)"
            ),
            traceback="",
        )

    def _replay(self, record: StepRecord) -> Any:
        self._replayed.append(record.name)
        return record.output

    def _save(self, record: StepRecord) -> None:
        with self._guard.shield():
            self._store.put(record)
        self._records[record.name] = record

    def _storable(self, name: str, value: Any) -> Any:
        try:
            return roundtrip(value, limit=self._limits.max_output_bytes)
        except NotStorable as exc:
            raise StepOutputInvalid(
                f"job {self.job_name!r} run {self.run_id}: the output of step {name!r} "
                f"cannot be stored: {exc}"
            ) from None

    def _step_limit(self, name: str) -> AbstractContextManager[None]:
        limit = self._limits.step_timeout
        if limit is None:
            return nullcontext()
        return self._guard.limit(limit.total_seconds(), lambda: self._step_timeout(name))

    def _check_took(self, name: str, started_at: datetime) -> None:
        # With a fake clock (or no signals) the limit is checked once the step returns.
        limit = self._limits.step_timeout
        if limit is not None and self._clock.now() - started_at > limit:
            raise self._step_timeout(name)

    def _step_timeout(self, name: str) -> JobTimeoutError:
        limit = self._limits.step_timeout or timedelta(0)
        return JobTimeoutError(
            f"job {self.job_name!r} run {self.run_id}: step {name!r} exceeded its "
            f"step_timeout of {format_duration(limit)}"
        )

    def records(self) -> Iterator[StepRecord]:
        """The records this attempt knows, in first-run order."""
        return iter(self._records.values())


def _executions(existing: StepRecord) -> int:
    """A wait or invoke that resumes to look again is the same execution: only one that
    failed before (and runs again on retry) counts another. Counting every look would
    show 20,000 attempts on a 7-day wait polled every 30 s."""
    return existing.attempts + 1 if existing.status is StepStatus.FAILED else existing.attempts
