"""The decisions of the step engine, shared by sync and async jobs. No Django here.

Each step's result is persisted before the next step starts, so a retry replays
completed steps from storage instead of executing them again: the welcome email
is not sent twice because step 3 failed. Step names are therefore the replay key
and must be unique within an attempt (``X_STEP_DUPLICATE``).

Every step is written once, as a *plan*: a generator that decides (replay, the
record to build, the deadline, whether to suspend) and yields each piece of work
it needs done: ``Io`` (read or write the stores) or ``Call`` (the user's code).
``Steps`` (``sync_steps.py``) performs that work by calling it; ``AsyncSteps``
(``async_steps.py``) by awaiting it. Only the calling convention differs, so the
two step APIs cannot drift apart.

Waiting (``sleep``, ``wait_for_event``) unwinds the run by raising
``Suspension``; the worker parks the run until ``wake_at`` instead of holding a
process. This is a port of ``seed/steps.ts``; see the README for what changed.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Generator, Iterator, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any, TypeVar

from ..exceptions import (
    ChildRunFailed,
    InvalidName,
    JobTimeoutError,
    StepDuplicateError,
    StepOutputInvalid,
    Suspension,
)
from . import otel
from .clock import Clock, SystemClock, aware
from .durations import Duration, after, format_duration, parse_duration
from .records import ChildBatches, ChildRuns, EventLookup, RecordedStep, StepStore
from .serialization import ErrorInfo, NotStorable, roundtrip, unstorable
from .vocabulary import StepKind, StepStatus

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


@dataclass(frozen=True, slots=True)
class Io:
    """Work on the stores. A ``write`` is never torn by a timeout: it finishes first."""

    work: Callable[[], Any]
    write: bool = False


@dataclass(frozen=True, slots=True)
class Call:
    """The user's code of a ``run`` step, performed under the step's time limit."""

    name: str
    fn: Callable[..., Any]
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    #: The step's execution count, for its trace span (``otel.step_span``).
    attempts: int = 1


#: A step's decisions: yields ``Io``/``Call``, is sent their results, returns the step's.
Plan = Generator[Io | Call, Any, T]


class StepEngine:
    """What ``Steps`` and ``AsyncSteps`` share: the state of one attempt and the plans."""

    def __init__(
        self,
        *,
        run_id: str,
        job_name: str,
        store: StepStore,
        events: EventLookup,
        clock: Clock | None = None,
        limits: StepLimits | None = None,
        records: Sequence[RecordedStep] | None = None,
        interrupt: Callable[[], BaseException | None] | None = None,
        children: ChildRuns | None = None,
        mark_starts: bool = False,
        batches: ChildBatches | None = None,
    ) -> None:
        """``records``: the run's records if the caller already knows them (a run that
        never started has none), saving a read; otherwise they are read at the first
        step. ``interrupt``: asked before each step; an exception it returns is raised
        there (a cancelled run stops at its next step). ``mark_starts``: record each
        ``run`` step's start before its function runs (one more write per step), so a
        worker that dies inside it names it (``STEP_LOST``).
        """
        self.run_id = run_id
        self.job_name = job_name
        self._store = store
        self._events = events
        self._clock = clock or SystemClock()
        self._limits = limits or StepLimits()
        self._loaded = records is not None
        self._records = {record.name: record for record in records or ()}
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

    def records(self) -> Iterator[RecordedStep]:
        """The records this attempt knows, in first-run order."""
        return iter(self._records.values())

    # -- run -------------------------------------------------------------
    def _run(
        self, name: str, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Plan[Any]:
        existing = yield from self._begin(name)
        if existing is not None and existing.status is StepStatus.COMPLETED:
            return self._replay(existing)
        attempts = (existing.attempts if existing else 0) + 1
        began = self._clock.now()
        record = RecordedStep(
            run_id=self.run_id,
            name=name,
            kind=StepKind.RUN,
            status=StepStatus.FAILED,
            started_at=existing.started_at if existing else began,
            attempts=attempts,
            last_started_at=began,  # rides in the statement that records the step
        )
        if self._mark_starts:
            yield from self._save(replace(record, error=self._lost(name, attempts)))
        try:
            value = yield Call(name, fn, args, kwargs, attempts)
            self._check_took(name, began)
            output = self._storable(name, value)
        except (Exception, SystemExit, KeyboardInterrupt) as exc:
            # The step failed, also when it called sys.exit(): the attempt records it.
            yield from self._save(replace(record, error=ErrorInfo.of(exc)))
            raise
        # Persist BEFORE returning: a crash one line later must not re-run this step.
        completed = replace(
            record, status=StepStatus.COMPLETED, output=output, completed_at=self._clock.now()
        )
        yield from self._save(completed)
        logger.info(
            "step completed: run=%s job=%s step=%r attempts=%d",
            self.run_id,
            self.job_name,
            name,
            attempts,
        )
        return output

    # -- sleep -----------------------------------------------------------
    @staticmethod
    def _sleep_args(
        name_or_duration: str | Duration, duration: Duration | None
    ) -> tuple[str, Callable[[datetime], datetime]]:
        """``sleep("3d")`` is the step ``sleep:3d``; ``sleep("cool-off", "3d")`` is named."""
        if duration is None:
            duration = name_or_duration
            shown = format_duration(duration) if isinstance(duration, timedelta) else str(duration)
            name = f"sleep:{shown}"
        else:
            name = str(name_or_duration)
        delta = parse_duration(duration)
        given = duration
        return name, lambda now: after(now, delta, given)

    @staticmethod
    def _until(name: str, when: datetime) -> Callable[[datetime], datetime]:
        aware(when, f"sleep_until({name!r}) time")
        return lambda now: when

    def _sleep(self, name: str, wake_at_from: Callable[[datetime], datetime]) -> Plan[None]:
        existing = yield from self._begin(name)
        if existing is not None and existing.status is StepStatus.COMPLETED:
            self._replay(existing)
            return
        with self._span(name, StepKind.SLEEP, existing):
            now = self._clock.now()
            if existing is not None and existing.status is StepStatus.SLEEPING and existing.wake_at:
                if existing.wake_at <= now:
                    yield from self._save(
                        replace(existing, status=StepStatus.COMPLETED, completed_at=now)
                    )
                    return
                raise Suspension(name, existing.wake_at, StepKind.SLEEP)
            wake_at = wake_at_from(now)
            record = RecordedStep(
                run_id=self.run_id,
                name=name,
                kind=StepKind.SLEEP,
                status=StepStatus.SLEEPING,
                started_at=now,
                wake_at=wake_at,
                attempts=1,
            )
            if wake_at <= now:  # sleeping zero (or into the past) is a no-op that is still traced
                yield from self._save(
                    replace(record, status=StepStatus.COMPLETED, completed_at=now)
                )
                return
            yield from self._save(record)
            raise Suspension(name, wake_at, StepKind.SLEEP)

    # -- wait_for_event ----------------------------------------------------
    def _wait(
        self, name: str, event: str, timeout: Duration, match: str | None, required: bool
    ) -> Plan[Any]:
        limit = _check_wait(name, event, timeout, match)
        existing = yield from self._begin(name)
        if existing is not None and existing.status is StepStatus.COMPLETED:
            return self._replay(existing)
        with self._span(name, StepKind.WAIT, existing):
            now = self._clock.now()
            if existing is None or existing.event_cursor is None:
                started_at, attempts = now, 1
                cursor: int = yield Io(lambda: self._events.cursor(event, match))
            else:
                started_at, cursor = existing.started_at, existing.event_cursor
                attempts = _executions(existing)
            record = RecordedStep(
                run_id=self.run_id,
                name=name,
                kind=StepKind.WAIT,
                status=StepStatus.WAITING,
                started_at=started_at,
                attempts=attempts,
                event=event,
                correlation_key=match,
                event_cursor=cursor,
                deadline=self._deadline(existing, now, limit, timeout),
            )
            hit = yield Io(lambda: self._events.find(event, match, cursor))
            if hit is not None:
                done = replace(
                    record, status=StepStatus.COMPLETED, output=hit.payload, completed_at=now
                )
                yield from self._save(done)
                return hit.payload
            deadline = record.deadline or now
            if now >= deadline:
                return (yield from self._wait_timed_out(record, limit, required, now))
            wake_at = min(deadline, after(now, self._limits.event_poll))
            yield from self._save(replace(record, wake_at=wake_at))
            raise Suspension(name, wake_at, StepKind.WAIT)

    def _wait_timed_out(
        self, record: RecordedStep, limit: timedelta, required: bool, now: datetime
    ) -> Plan[None]:
        if required:
            error = JobTimeoutError(
                f"job {self.job_name!r} run {self.run_id}: step {record.name!r} got no "
                f"{record.event!r} event within {format_duration(limit)}"
            )
            yield from self._save(
                replace(record, status=StepStatus.FAILED, error=ErrorInfo.of(error))
            )
            raise error
        logger.warning(
            "step %r of run %s: no %r event within %s; continuing with None",
            record.name,
            self.run_id,
            record.event,
            format_duration(limit),
        )
        done = replace(record, status=StepStatus.COMPLETED, output=None, completed_at=now)
        yield from self._save(done)
        return None

    # -- publish -----------------------------------------------------------
    def _publish(self, name: str, event: str, payload: Any, key: str | None) -> Plan[int]:
        existing = yield from self._begin(name)
        if existing is not None and existing.status is StepStatus.COMPLETED:
            return int(self._replay(existing)["position"])
        now = self._clock.now()
        attempts = (existing.attempts if existing else 0) + 1

        def publish_and_record() -> tuple[int, RecordedStep]:
            # The event and the step record commit together: one event however often
            # the run replays.
            with self._store.atomic():
                position = self._events.publish(event, payload, key=key)
                record = RecordedStep(
                    run_id=self.run_id,
                    name=name,
                    kind=StepKind.PUBLISH,
                    status=StepStatus.COMPLETED,
                    started_at=now,
                    completed_at=now,
                    attempts=attempts,
                    output={"position": position},
                    event=event,
                    correlation_key=key,
                )
                self._store.put(record)
            return position, record

        position, record = yield Io(publish_and_record, write=True)
        self._records[name] = record
        return int(position)

    # -- invoke ------------------------------------------------------------
    def _invoke(
        self, name: str, job: Any, args: tuple[Any, ...], kwargs: dict[str, Any], timeout: Duration
    ) -> Plan[Any]:
        children = self._children
        if children is None:
            raise RuntimeError("step.invoke needs child runs; this engine has none")
        limit = parse_duration(timeout)
        existing = yield from self._begin(name)
        if existing is not None and existing.status is StepStatus.COMPLETED:
            return self._replay(existing)
        with self._span(name, StepKind.INVOKE, existing):
            now = self._clock.now()
            deadline = self._deadline(existing, now, limit, timeout)  # before a child starts
            # The recorded child, or a new one when none is recorded (a first start, or an
            # operator's retry let go of a failed child).
            child = existing.correlation_key if existing is not None else None
            if child is None:
                child = yield Io(lambda: children.start(self.run_id, name, job, args, kwargs), True)
            record = RecordedStep(
                run_id=self.run_id,
                name=name,
                kind=StepKind.INVOKE,
                status=StepStatus.WAITING,
                started_at=existing.started_at if existing else now,
                attempts=_executions(existing) if existing is not None else 1,
                correlation_key=child,
                deadline=deadline,
            )
            outcome = yield Io(lambda: children.outcome(str(child)))
            if outcome is not None and outcome.succeeded:
                done = replace(
                    record, status=StepStatus.COMPLETED, output=outcome.result, completed_at=now
                )
                yield from self._save(done)
                return outcome.result
            error: Exception | None = None
            if outcome is not None:
                error = ChildRunFailed(
                    f"job {self.job_name!r} run {self.run_id}: step {name!r}: child run {child} "
                    f"failed: {outcome.error.message if outcome.error else 'unknown error'}"
                )
            elif now >= deadline:
                error = JobTimeoutError(
                    f"job {self.job_name!r} run {self.run_id}: step {name!r}: child run {child} "
                    f"did not finish within {format_duration(limit)}"
                )
            if error is not None:
                yield from self._save(
                    replace(record, status=StepStatus.FAILED, error=ErrorInfo.of(error))
                )
                raise error
            wake_at = min(deadline, after(now, self._limits.event_poll))
            yield from self._save(replace(record, wake_at=wake_at))
            raise Suspension(name, wake_at, StepKind.INVOKE)

    @staticmethod
    def _deadline(
        existing: RecordedStep | None, now: datetime, limit: timedelta, timeout: Duration
    ) -> datetime:
        """When a wait or an invoke gives up: recorded once, when its window opens. A
        record without one (a retry cleared it) opens a fresh window now."""
        if existing is not None and existing.deadline is not None:
            return existing.deadline
        return after(now, limit, timeout)

    # -- helpers -----------------------------------------------------------
    def _begin(self, name: str) -> Plan[RecordedStep | None]:
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
        if not self._loaded:
            known: Sequence[RecordedStep] = yield Io(lambda: self._store.list(self.run_id))
            self._records = {record.name: record for record in known}
            self._loaded = True
        return self._records.get(name)

    def _span(self, name: str, kind: StepKind, existing: RecordedStep | None) -> Any:
        """The span of one execution of a step that may suspend the run (``otel.py``);
        a replay has none."""
        attempt = _executions(existing) if existing is not None else 1
        return otel.step_span(name, self.run_id, attempt, str(kind))

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

    def _replay(self, record: RecordedStep) -> Any:
        self._replayed.append(record.name)
        return record.output

    def _save(self, record: RecordedStep) -> Plan[None]:
        yield Io(lambda: self._store.put(record), write=True)
        self._records[record.name] = record

    def _fail(self, record: RecordedStep, error: Exception) -> Plan[None]:
        yield from self._save(replace(record, status=StepStatus.FAILED, error=ErrorInfo.of(error)))

    def _storable(self, name: str, value: Any) -> Any:
        try:
            return roundtrip(value, limit=self._limits.max_output_bytes)
        except NotStorable as exc:
            raise StepOutputInvalid(
                f"job {self.job_name!r} run {self.run_id}: the output of step {name!r} "
                f"cannot be stored: {exc}"
            ) from None

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


def _executions(existing: RecordedStep) -> int:
    """A wait or invoke that resumes to look again is the same execution: only one that
    failed before (and runs again on retry) counts another. Counting every look would
    show 20,000 attempts on a 7-day wait polled every 30 s."""
    return existing.attempts + 1 if existing.status is StepStatus.FAILED else existing.attempts


def _check_wait(name: str, event: str, timeout: Duration, match: str | None) -> timedelta:
    """The arguments of ``wait_for_event``, checked before anything is read or written."""
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
            raise InvalidName(f"wait_for_event({name!r}): {what} {text!r} cannot be stored: {why}")
    return limit
