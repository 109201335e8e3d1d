"""One execution of a job function up to its next stop. No Django ORM here.

The outcome is a value, not an exception: ``Succeeded``, ``Failed`` or
``Suspended``; the caller (``worker/execution.py``) decides what that means for the run.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from ..exceptions import (
    DurableJobsError,
    JobTimeoutError,
    RetryAfter,
    StepOutputInvalid,
    StepUsageError,
    Suspension,
)
from .durations import format_duration
from .progress import Progress
from .serialization import ErrorInfo, NotStorable, roundtrip
from .sync_steps import Steps
from .timeouts import Overrun, TimeGuard
from .vocabulary import StepKind

if TYPE_CHECKING:
    from .async_steps import AsyncSteps

_jobs_logger = logging.getLogger("django_durable_jobs.jobs")

#: What job code may raise to leave that a bare ``except Exception`` does not catch; a
#: job's own failure, never a stop of the process that executes it.
JOB_EXITS = (SystemExit, KeyboardInterrupt)


@dataclass(frozen=True, kw_only=True)
class JobContext:
    """What a job function receives as its first argument, ``ctx``."""

    step: Steps
    run_id: str
    attempt: int
    job_name: str
    logger: logging.Logger
    #: The slot a schedule started this run for (aware); None if no schedule did.
    scheduled_at: datetime | None = None
    #: The attempt's progress (``set_progress``); ``progress.value`` is the newest.
    progress: Progress = field(default_factory=Progress)

    def set_progress(self, value: Any) -> None:
        """Store ``value`` (any JSON) on the run as ``JobRun.progress``, shown by the
        admin and ``jobs show``; last write wins, not a step (not replayed). Cheap in a
        loop: written at most every 500 ms, at the next step when due, and always at
        the run's next stop (``engine/progress.py``). Not awaited in async jobs either.

        >>> ctx.set_progress({"done": 40, "total": 100})  # doctest: +SKIP
        """
        self.progress.set(value)

    def patched(self, change_id: str) -> bool:
        """True for a run that reaches this call with no recorded step left to replay (a
        new run, or one that had not got this far when the code changed), False for a
        run whose recorded history already goes past it. Decided once, recorded as the
        step ``patch:<change_id>``, the same on every replay.

        >>> if ctx.patched("send-sms"):  # doctest: +SKIP
        ...     ctx.step.run("sms", send_sms, user_id)
        """
        return self.step.patched(change_id)

    def deprecate_patch(self, change_id: str) -> None:
        """The old branch of ``patched(change_id)`` is gone from the code: runs that
        recorded either answer go on (the new code is what runs). Remove the call once
        no unfinished run recorded the patch (``manage.py jobs versions``)."""
        self.step.deprecate_patch(change_id)


@dataclass(frozen=True, kw_only=True)
class AsyncJobContext:
    """What an ``async def`` job receives as ``ctx``: the same, with an awaited step API."""

    step: AsyncSteps
    run_id: str
    attempt: int
    job_name: str
    logger: logging.Logger
    #: The slot a schedule started this run for (aware); None if no schedule did.
    scheduled_at: datetime | None = None
    #: The attempt's progress (``set_progress``); ``progress.value`` is the newest.
    progress: Progress = field(default_factory=Progress)

    def set_progress(self, value: Any) -> None:
        """Store ``value`` (any JSON) on the run as ``JobRun.progress``, shown by the
        admin and ``jobs show``; last write wins, not a step (not replayed). Cheap in a
        loop: written at most every 500 ms, at the next step when due, and always at
        the run's next stop (``engine/progress.py``). Not awaited in async jobs either.

        >>> ctx.set_progress({"done": 40, "total": 100})  # doctest: +SKIP
        """
        self.progress.set(value)

    def patched(self, change_id: str) -> bool:
        """``JobContext.patched``, not awaited: ``if ctx.patched("send-sms"): ...``."""
        return self.step.patched(change_id)

    def deprecate_patch(self, change_id: str) -> None:
        """``JobContext.deprecate_patch``, not awaited."""
        self.step.deprecate_patch(change_id)


@dataclass(frozen=True)
class Succeeded:
    result: Any


@dataclass(frozen=True)
class Failed:
    error: ErrorInfo
    retryable: bool
    #: From ``RetryAfter``: the delay before the next attempt, instead of the backoff.
    retry_after: timedelta | None = None


@dataclass(frozen=True)
class Suspended:
    step: str
    wake_at: datetime | None
    #: What the run waits for: a sleep, an event, child runs.
    kind: StepKind


Outcome = Succeeded | Failed | Suspended


class _RunFilter(logging.Filter):
    def __init__(self, run_id: str, job_name: str, attempt: int) -> None:
        super().__init__()
        self.values = {"run_id": run_id, "job_name": job_name, "attempt": attempt}

    def filter(self, record: logging.LogRecord) -> bool:
        record.__dict__.update(self.values)
        return True


def run_logger(run_id: str, job_name: str, attempt: int) -> logging.Logger:
    """A ``Logger`` whose records carry ``run_id``, ``job_name`` and ``attempt``.

    It is not registered with ``logging.getLogger`` (that would keep one logger per
    run forever); it propagates to ``django_durable_jobs.jobs``.
    """
    bound = logging.Logger(f"django_durable_jobs.jobs.{job_name}")
    bound.parent = _jobs_logger
    bound.addFilter(_RunFilter(run_id, job_name, attempt))
    return bound


def run_attempt(
    fn: Callable[..., Any],
    ctx: JobContext,
    args: Sequence[Any],
    kwargs: Mapping[str, Any],
    *,
    timeout: timedelta | None = None,
    guard: TimeGuard | None = None,
    max_result_bytes: int | None = None,
) -> Outcome:
    """Call ``fn(ctx, *args, **kwargs)`` and classify how it stopped."""
    guard = guard or TimeGuard()
    try:
        limit = timeout.total_seconds() if timeout else None
        with guard.limit(limit, lambda: _timed_out(ctx, timeout)):
            value = fn(ctx, *args, **kwargs)
        _not_swallowed(ctx)
        return Succeeded(_storable_result(ctx, value, max_result_bytes))
    except Overrun as overrun:  # a timeout the job tried to swallow
        return Failed(ErrorInfo.of(overrun.error), retryable=False)
    except (Suspension, Exception, *JOB_EXITS) as stop:
        return _stopped(stop)


async def arun_attempt(
    fn: Callable[..., Any],
    ctx: AsyncJobContext,
    args: Sequence[Any],
    kwargs: Mapping[str, Any],
    *,
    timeout: timedelta | None = None,
    max_result_bytes: int | None = None,
) -> Outcome:
    """Await ``fn(ctx, *args, **kwargs)`` and classify how it stopped, as ``run_attempt``.

    The ``timeout`` cancels the job's task: the ``CancelledError`` stops it at its
    current ``await`` (an ``except Exception`` cannot catch it).
    """
    scope = asyncio.timeout(timeout.total_seconds() if timeout else None)
    began = time.monotonic()
    try:
        async with scope:
            value = await fn(ctx, *args, **kwargs)
            await ctx.step.save_answers()  # ``patched`` answers with no step after them
        ctx.step.check_awaited()  # a step called without ``await`` never ran
        _not_swallowed(ctx)
        if timeout is not None and time.monotonic() - began > timeout.total_seconds():
            # The cancellation never landed: the job blocked the event loop past its
            # timeout (time.sleep), or caught CancelledError and carried on.
            return Failed(ErrorInfo.of(_timed_out(ctx, timeout)), retryable=False)
        return Succeeded(_storable_result(ctx, value, max_result_bytes))
    except TimeoutError as exc:
        if scope.expired():  # the job's task was cancelled, and gather cancels its own
            return Failed(ErrorInfo.of(_timed_out(ctx, timeout)), retryable=False)
        await ctx.step.finish_started(_left(timeout, began))
        return _stopped(exc)
    except BaseExceptionGroup as group:  # an asyncio.TaskGroup: failed, or a step suspended
        # Before ``Exception``, which an ExceptionGroup is: a group of failures stops the
        # attempt as its first failure would (a NonRetriable is not retried).
        if (inside := _stop_in(group)) is None:
            raise
        await ctx.step.finish_started(_left(timeout, began))
        return _grouped(_stopped(inside), group)
    except (Suspension, Exception, *JOB_EXITS) as stop:
        # A gathered step still executing: recorded first, within the job's timeout.
        await ctx.step.finish_started(_left(timeout, began))
        return _stopped(stop)
    finally:
        ctx.step.check_awaited(fail=False)


def _left(timeout: timedelta | None, began: float) -> float | None:
    """The seconds of ``timeout`` left since ``began`` (monotonic); None: no timeout."""
    return None if timeout is None else timeout.total_seconds() - (time.monotonic() - began)


def _stop_in(group: BaseExceptionGroup[BaseException]) -> BaseException | None:
    """How an attempt that raised ``group`` stopped: its first failure (an exception, or
    ``sys.exit()`` in job code), else its first ``Suspension``; None for a group of
    anything else (a cancellation), which is not the job's to answer."""
    leaves: list[BaseException] = []
    pending: list[BaseException] = [group]
    while pending:
        current = pending.pop(0)
        if isinstance(current, BaseExceptionGroup):
            pending[:0] = list(current.exceptions)
        else:
            leaves.append(current)
    failures = [leaf for leaf in leaves if isinstance(leaf, (Exception, *JOB_EXITS))]
    suspensions = [leaf for leaf in leaves if isinstance(leaf, Suspension)]
    return (failures or suspensions or [None])[0]


def _grouped(outcome: Outcome, group: BaseExceptionGroup[BaseException]) -> Outcome:
    """``outcome`` of the failure ``_stop_in`` found in ``group``, with the group's
    traceback, which shows every failure of the group, not only the first."""
    if not isinstance(outcome, Failed):
        return outcome
    return replace(outcome, error=replace(outcome.error, traceback=ErrorInfo.of(group).traceback))


def _not_swallowed(ctx: JobContext | AsyncJobContext) -> None:
    """A job that returned although one of its steps suspended the run caught the
    ``Suspension`` (``except BaseException:``, a bare ``except:``) and carried on: the
    sleep or wait never happened. That is a bug to fix, not a success: ``StepUsageError``."""
    suspension = ctx.step.suspended
    if suspension is not None:
        raise StepUsageError(
            f"job {ctx.job_name!r} run {ctx.run_id}: step {suspension.step!r} suspended the "
            "run, but the job carried on: an `except BaseException:` or a bare `except:` "
            "caught the Suspension; let it propagate (catch Exception instead)"
        )


def _stopped(stop: BaseException) -> Outcome:
    """The outcome of an attempt that raised ``stop`` (a suspension or a failure)."""
    if isinstance(stop, Suspension):
        return Suspended(stop.step, stop.wake_at, stop.kind)
    if isinstance(stop, JOB_EXITS):
        # sys.exit(), exit() or KeyboardInterrupt raised by job code ends this attempt,
        # not the worker: the operator's Ctrl-C reaches the worker's own signal handler.
        return Failed(ErrorInfo.of(stop), retryable=True)
    retryable = not (isinstance(stop, DurableJobsError) and not stop.retryable)
    delay = stop.delay if isinstance(stop, RetryAfter) else None
    return Failed(ErrorInfo.of(stop), retryable, retry_after=delay)


def _timed_out(ctx: JobContext | AsyncJobContext, timeout: timedelta | None) -> JobTimeoutError:
    shown = format_duration(timeout) if timeout is not None else "?"
    return JobTimeoutError(
        f"job {ctx.job_name!r} run {ctx.run_id}: attempt {ctx.attempt} exceeded its "
        f"timeout of {shown}"
    )


def _storable_result(ctx: JobContext | AsyncJobContext, value: Any, limit: int | None) -> Any:
    try:
        return roundtrip(value, limit=limit)
    except NotStorable as exc:
        raise StepOutputInvalid(
            f"job {ctx.job_name!r} run {ctx.run_id}: the return value cannot be stored: {exc}"
        ) from None
