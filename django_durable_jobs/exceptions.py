"""Every error the app raises, each with a stable ``code``.

Codes are part of the public contract (docs/reference/errors.md): they are stored on failed runs,
printed by ``manage.py jobs`` and safe to match on in user code.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from .engine.durations import parse_duration

# Defined below the duration parser (engine/errors.py) so that RetryAfter can parse its
# delay here without an import cycle; this module stays their public home.
from .engine.errors import DurableJobsError as DurableJobsError
from .engine.errors import InvalidDuration as InvalidDuration
from .engine.vocabulary import StepKind


class StepDuplicateError(DurableJobsError):
    """A step name was used twice in one attempt; step names are the replay key."""

    code = "X_STEP_DUPLICATE"
    retryable = False


class JobTimeoutError(DurableJobsError):
    """A run, a step or a required event wait ran out of time."""

    code = "X_JOB_TIMEOUT"
    retryable = False


class UnknownJob(DurableJobsError):
    """No job is registered under that name (on this process)."""

    code = "X_JOB_UNKNOWN"
    retryable = False


class InvalidPayload(DurableJobsError, TypeError):
    """Arguments or an event payload that are not strict JSON, or arguments that do not
    fit the job's signature. A ``TypeError`` too, as Django documents for ``django.tasks``
    arguments and as calling a function with wrong arguments raises."""

    code = "X_PAYLOAD_INVALID"
    retryable = False


class PayloadTooLarge(InvalidPayload):
    """Arguments or an event payload over ``DURABLE_JOBS["MAX_PAYLOAD_BYTES"]``."""

    code = "X_PAYLOAD_TOO_LARGE"


class StepOutputInvalid(DurableJobsError):
    """A step returned a value that cannot be stored; retrying would not change it."""

    code = "X_STEP_OUTPUT_INVALID"
    retryable = False


class InvalidName(DurableJobsError, ValueError):
    """A step name, event name or key that cannot be stored: empty, too long, or with a
    character no database column takes (NUL, a lone surrogate)."""

    code = "X_NAME_INVALID"
    retryable = False


class StepUsageError(DurableJobsError, TypeError):
    """The step API called in a way no retry can fix: a step function that is not
    callable, or async in a sync job; a step of an ``async def`` job that was never
    awaited; a naive ``sleep_until`` time; a ``match`` that is not a string."""

    code = "X_STEP_USAGE"
    retryable = False


class RunCancelled(DurableJobsError):
    """The run was cancelled while it executed; it stops at its next step."""

    code = "X_RUN_CANCELLED"
    retryable = False


class ChildRunFailed(DurableJobsError):
    """A child run started with ``step.invoke`` failed; the message carries its error."""

    code = "X_CHILD_FAILED"
    retryable = False


class AttemptsExhausted(DurableJobsError):
    """Every attempt of a run was used up by workers that died while running it."""

    code = "X_ATTEMPTS_EXHAUSTED"
    retryable = False


class NonRetriable(DurableJobsError):
    """Raise in a job or a step to fail the run at once, whatever retries are left.

    >>> raise NonRetriable("customer 42 was deleted")  # doctest: +SKIP
    """

    code = "X_NON_RETRIABLE"
    retryable = False


class RetryAfter(DurableJobsError):
    """Raise in a job or a step: this attempt fails and the next one starts after
    ``delay`` (a duration) instead of the backoff. With no retries left the run fails.

    >>> raise RetryAfter("30s")  # doctest: +SKIP
    """

    code = "X_RETRY_AFTER"

    def __init__(self, delay: Any, message: str = "") -> None:
        self.delay: timedelta = parse_duration(delay)
        super().__init__(message or f"retry after {self.delay}")


class RunNotFound(DurableJobsError, LookupError):
    """No run has that id."""

    code = "X_RUN_NOT_FOUND"
    retryable = False


class RunStateError(DurableJobsError, ValueError):
    """The run's status does not allow the verb (e.g. retrying a running run)."""

    code = "X_RUN_STATE"
    retryable = False


class StepNotFound(DurableJobsError, LookupError):
    """``replay_from`` named a step the run has not recorded."""

    code = "X_STEP_UNKNOWN"
    retryable = False


class Suspension(BaseException):
    """Unwinds a run that must wait (sleep, event, child run); never a failure.

    It derives from ``BaseException`` so that a job's ``except Exception:`` cannot
    swallow it, and the worker parks the run until ``wake_at`` instead of
    counting an attempt. ``kind`` says what it waits for (``StepKind.SLEEP``: the
    run sleeps; any other: it waits for an event or child runs).
    """

    def __init__(self, step: str, wake_at: datetime | None, kind: StepKind) -> None:
        super().__init__(f"step {step!r} suspended until {wake_at} ({kind})")
        self.step = step
        self.wake_at = wake_at
        self.kind = kind


class InvalidSchedule(DurableJobsError, ValueError):
    """A cron expression or time zone that cannot be a schedule."""

    code = "X_SCHEDULE_INVALID"
    retryable = False
