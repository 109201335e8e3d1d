"""The steps that wait with a deadline: ``wait_for_event``, ``receive`` and ``invoke``. Each
records its deadline once, when its window opens, looks for what it waits for, and
suspends the run until the next look (the safety poll) or the deadline. No Django."""

from __future__ import annotations

import logging
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any
from uuid import UUID

from ..exceptions import (
    ChildRunFailed,
    InvalidName,
    JobTimeoutError,
    StepUsageError,
    Suspension,
)
from .core import MAX_EVENT_NAME, MAX_KEY, Io, Plan, StepCore, _executions
from .durations import Duration, after, format_duration, parse_duration
from .records import RecordedStep
from .serialization import ErrorInfo, unstorable
from .vocabulary import StepKind, StepStatus

logger = logging.getLogger("django_durable_jobs.steps")


class Waits(StepCore):
    """``wait_for_event``, ``receive`` and ``invoke`` (``StepEngine`` adds the others)."""

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
        what = "message" if record.kind is StepKind.RECEIVE else "event"
        if required:
            error = JobTimeoutError(
                f"job {self.job_name!r} run {self.run_id}: step {record.name!r} got no "
                f"{record.event!r} {what} within {format_duration(limit)}"
            )
            yield from self._save(
                replace(record, status=StepStatus.FAILED, error=ErrorInfo.of(error))
            )
            raise error
        logger.warning(
            "step %r of run %s: no %r %s within %s; continuing with None",
            record.name,
            self.run_id,
            record.event,
            what,
            format_duration(limit),
        )
        done = replace(record, status=StepStatus.COMPLETED, output=None, completed_at=now)
        yield from self._save(done)
        return None

    # -- receive -----------------------------------------------------------
    def _receive(self, name: str, topic: str, timeout: Duration, required: bool) -> Plan[Any]:
        mailbox = self._mailbox
        if mailbox is None:
            raise RuntimeError("step.receive needs a mailbox; this engine has none")
        limit = _check_topic(name, topic, timeout)
        existing = yield from self._begin(name)
        if existing is not None and existing.status is StepStatus.COMPLETED:
            return self._replay(existing)
        with self._span(name, StepKind.RECEIVE, existing):
            now = self._clock.now()
            record = RecordedStep(
                run_id=self.run_id,
                name=name,
                kind=StepKind.RECEIVE,
                status=StepStatus.WAITING,
                started_at=existing.started_at if existing else now,
                attempts=_executions(existing) if existing is not None else 1,
                event=topic,
                deadline=self._deadline(existing, now, limit, timeout),
            )

            def take() -> RecordedStep | None:
                # The message is received only if the completed record commits with it:
                # a crash in between leaves both undone, and the retry takes it again.
                with self._store.step_transaction(StepKind.RECEIVE):
                    hit = mailbox.take(self.run_id, topic, name, now)
                    if hit is None:
                        return None
                    done = replace(
                        record, status=StepStatus.COMPLETED, output=hit.payload, completed_at=now
                    )
                    self._store.put(done)
                return done

            taken: RecordedStep | None = yield Io(take, write=True)
            if taken is not None:
                self._records[name] = taken
                return taken.output
            deadline = record.deadline or now
            if now >= deadline:
                return (yield from self._wait_timed_out(record, limit, required, now))
            wake_at = min(deadline, after(now, self._limits.event_poll))
            yield from self._save(replace(record, wake_at=wake_at))
            raise Suspension(name, wake_at, StepKind.RECEIVE)

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
            child = existing.child if existing is not None else None
            if child is None:
                child = yield Io(lambda: children.start(self.run_id, name, job, args, kwargs), True)
            record = RecordedStep(
                run_id=self.run_id,
                name=name,
                kind=StepKind.INVOKE,
                status=StepStatus.WAITING,
                started_at=existing.started_at if existing else now,
                attempts=_executions(existing) if existing is not None else 1,
                child=child,
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


def _check_wait(name: str, event: str, timeout: Duration, match: str | None) -> timedelta:
    """The arguments of ``wait_for_event``, checked before anything is read or written."""
    limit = parse_duration(timeout)
    if match is not None and not isinstance(match, str):
        raise StepUsageError(
            f"wait_for_event({name!r}): match must be a str, got {match!r}"
            + (f" (write match=str({match!r}))" if isinstance(match, int | UUID) else "")
        )
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


def _check_topic(name: str, topic: str, timeout: Duration) -> timedelta:
    """The arguments of ``receive``, checked before anything is read or written."""
    limit = parse_duration(timeout)
    if not isinstance(topic, str) or not topic or len(topic) > MAX_EVENT_NAME:
        raise InvalidName(
            f"receive({name!r}): topics are non-empty strings of at most "
            f"{MAX_EVENT_NAME} characters, got {topic!r}"
        )
    if (why := unstorable(topic)) is not None:
        raise InvalidName(f"receive({name!r}): topic {topic!r} cannot be stored: {why}")
    return limit
