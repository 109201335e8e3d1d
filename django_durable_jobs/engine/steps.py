"""The decisions of the step engine, shared by sync and async jobs. No Django here.

Each step's result is persisted before the next step starts, so a retry replays
completed steps from storage instead of executing them again: the welcome email
is not sent twice because step 3 failed. Step names are therefore the replay key
and must be unique within an attempt (``X_STEP_DUPLICATE``).

Every step is written once, as a *plan*: a generator that decides (replay, the
record to build, the deadline, whether to suspend) and yields each piece of work
it needs done: ``Io`` (read or write the stores) or ``UserCall`` (the user's code).
``Steps`` (``sync_steps.py``) performs that work by calling it; ``AsyncSteps``
(``async_steps.py``) by awaiting it. Only the calling convention differs, so the
two step APIs cannot drift apart.

Waiting (``sleep``, ``wait_for_event``) unwinds the run by raising
``Suspension``; the worker parks the run until ``wake_at`` instead of holding a
process.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Callable
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

from ..exceptions import StepUsageError, Suspension
from . import otel, patches
from .clock import aware
from .core import Io, Plan, UserCall
from .durations import Duration, after, format_duration, parse_duration
from .records import RecordedStep
from .serialization import ErrorInfo
from .vocabulary import StepKind, StepStatus
from .waits import Waits

logger = logging.getLogger("django_durable_jobs.steps")


class StepEngine(Waits):
    """What ``Steps`` and ``AsyncSteps`` share: the state of one attempt and the plans."""

    # -- run -------------------------------------------------------------
    def _execution(
        self, name: str, kind: StepKind
    ) -> Plan[tuple[RecordedStep | None, RecordedStep]]:
        """The start of a step that calls the user's function (``run``, ``atomic``): its
        completed record to replay, or None and this execution's record (failed until
        it completes; its start recorded first with ``mark_starts``)."""
        existing = yield from self._begin(name)
        if existing is not None and existing.status is StepStatus.COMPLETED:
            return existing, existing
        attempts = (existing.attempts if existing else 0) + 1
        began = self._clock.now()
        record = RecordedStep(
            run_id=self.run_id,
            name=name,
            kind=kind,
            status=StepStatus.FAILED,
            started_at=existing.started_at if existing else began,
            attempts=attempts,
            last_started_at=began,  # rides in the statement that records the step
        )
        if self._mark_starts:
            yield from self._save(replace(record, error=self._lost(name, attempts)))
        return None, record

    def _run(
        self, name: str, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Plan[Any]:
        if not callable(fn):
            raise StepUsageError(
                f"job {self.job_name!r}: step {name!r}: run(name, fn, ...) takes a function "
                f"to call, got {fn!r}"
            )
        completed, record = yield from self._execution(name, StepKind.RUN)
        if completed is not None:
            return self._replay(completed)
        attempts, began = record.attempts, record.last_started_at or record.started_at
        try:
            value = yield UserCall(name, fn, args, kwargs, attempts)
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
        # DEBUG: a line per step cost a fifth of a ten-step run's time (runjobs -v 2).
        logger.debug(
            "step completed: run=%s job=%s step=%r attempts=%d",
            self.run_id,
            self.job_name,
            name,
            attempts,
        )
        return output

    # -- atomic ----------------------------------------------------------
    def _atomic(
        self, name: str, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Plan[Any]:
        """``fn`` and the step's record in one transaction on the jobs database
        (``StepStore.step_transaction``): its writes there and the record commit
        together, only while this worker holds the lease, or neither does. A retry
        then finds either the record (and replays it) or nothing of ``fn``'s (and runs
        it again on a clean slate): ``fn``'s writes take effect exactly once."""
        if not callable(fn) or inspect.iscoroutinefunction(fn):
            raise StepUsageError(
                f"job {self.job_name!r}: step {name!r}: atomic(name, fn, ...) takes a "
                f"plain function, whose database writes commit with the step, got {fn!r}"
            )
        completed, record = yield from self._execution(name, StepKind.ATOMIC)
        if completed is not None:
            return self._replay(completed)
        attempts, began = record.attempts, record.last_started_at or record.started_at
        done: list[Any] = []

        def in_transaction() -> tuple[Any, RecordedStep]:
            span = otel.step_span(name, self.run_id, attempts, str(StepKind.ATOMIC))
            with span, self._store.step_transaction() as transaction:
                done.append(transaction)
                value = fn(*args, **kwargs)
                if inspect.isawaitable(value):
                    getattr(value, "close", lambda: None)()
                    raise StepUsageError(
                        f"job {self.job_name!r}: step {name!r}: atomic() ran {fn!r}, which "
                        "returned an awaitable: an atomic step's function is a plain one"
                    )
                self._check_took(name, began)
                output = self._storable(name, value)
                completed = replace(
                    record,
                    status=StepStatus.COMPLETED,
                    output=output,
                    completed_at=self._clock.now(),
                )
                self._store.put(completed)  # last: nothing of the step can fail after it
            return output, completed

        try:
            # A write: never torn by a timeout (fn is not interrupted mid-transaction;
            # a step that outlasts step_timeout is rolled back when fn returns).
            output, completed = yield Io(in_transaction, write=True)
        except (Exception, SystemExit, KeyboardInterrupt) as exc:
            if done and done[0].committed:  # failed after its commit: the step is done
                raise
            # Rolled back, fn's writes with it, unless the commit landed and only its
            # answer was lost: a completed record is never overwritten by a failure.
            stored = yield Io(lambda: self._store.get(self.run_id, name))
            if stored is not None and stored.status is StepStatus.COMPLETED:
                raise
            yield from self._save(replace(record, error=ErrorInfo.of(exc)))
            raise
        self._records[name] = completed
        logger.debug(
            "step completed: run=%s job=%s step=%r attempts=%d (atomic)",
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
        if not isinstance(when, datetime):
            raise StepUsageError(f"sleep_until({name!r}) takes a datetime, got {when!r}")
        try:
            aware(when, f"sleep_until({name!r}) time")
        except ValueError as exc:
            raise StepUsageError(str(exc)) from None
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

    # -- patches (patches.py) ------------------------------------------------
    def _patched(self, change_id: str) -> Plan[bool]:
        if not self._loaded:
            yield from self._load()
        answer, record = patches.answer(self, change_id)
        if record is not None:
            self._unsaved.append(record)
            yield from self._save_answers()
        return answer

    def _deprecate_patch(self, change_id: str) -> Plan[None]:
        if not self._loaded:
            yield from self._load()
        patches.deprecate(self, change_id)

    def unreached_steps(self) -> list[str] | None:
        """The run's completed steps this attempt never reached (``patches.unreached``);
        None if the attempt never read the run's records."""
        return patches.unreached(self) if self._loaded else None
