"""Durable, step-memoized background jobs for Django.

Public API: ``job``, ``enqueue``, the errors. Models live in
``django_durable_jobs.models``.
"""

from typing import TYPE_CHECKING, Any

from .declare import job
from .engine.cron import Cron
from .engine.limits import CancelOn, Concurrency, Debounce, RateLimit, Throttle
from .exceptions import (
    AttemptsExhausted,
    ChildRunFailed,
    DurableJobsError,
    InvalidDuration,
    InvalidName,
    InvalidPayload,
    InvalidSchedule,
    JobTimeoutError,
    NonRetriable,
    PayloadTooLarge,
    RetryAfter,
    RunCancelled,
    RunFailed,
    RunNotFound,
    RunStateError,
    StepDuplicateError,
    StepNotFound,
    StepOutputInvalid,
    StepUsageError,
    Suspension,
    UnknownJob,
)

if TYPE_CHECKING:
    from .models import JobRun

__all__ = [
    "AttemptsExhausted",
    "CancelOn",
    "ChildRunFailed",
    "Concurrency",
    "Cron",
    "Debounce",
    "DurableJobsError",
    "InvalidDuration",
    "InvalidName",
    "InvalidPayload",
    "InvalidSchedule",
    "JobTimeoutError",
    "NonRetriable",
    "PayloadTooLarge",
    "RateLimit",
    "RetryAfter",
    "RunCancelled",
    "RunFailed",
    "RunNotFound",
    "RunStateError",
    "StepDuplicateError",
    "StepNotFound",
    "StepOutputInvalid",
    "StepUsageError",
    "Suspension",
    "Throttle",
    "UnknownJob",
    "aenqueue",
    "aenqueue_on_commit",
    "apublish_event",
    "asend",
    "enqueue",
    "enqueue_on_commit",
    "job",
    "publish_event",
    "publish_on",
    "send",
]


def enqueue(job_name: str, /, *args: Any, **kwargs: Any) -> "JobRun":
    """Start a run of the job registered as ``job_name``: ``enqueue("onboarding", user_id=42)``."""
    from .verbs.enqueue import enqueue as enqueue_by_name

    return enqueue_by_name(job_name, *args, **kwargs)


def enqueue_on_commit(job_name: str, /, *args: Any, **kwargs: Any) -> None:
    """``enqueue`` once the caller's transaction on ``default`` commits (nothing if it
    rolls back): for jobs on a database of their own (``DURABLE_JOBS["DATABASE"]``).

    >>> enqueue_on_commit("onboarding", user_id=42)  # doctest: +SKIP
    """
    from .verbs.enqueue import enqueue_on_commit as on_commit

    on_commit(job_name, *args, **kwargs)


async def aenqueue_on_commit(job_name: str, /, *args: Any, **kwargs: Any) -> None:
    """``enqueue_on_commit`` for async views."""
    from asgiref.sync import sync_to_async

    await sync_to_async(enqueue_on_commit, thread_sensitive=True)(job_name, *args, **kwargs)


def publish_event(event: str, payload: Any = None, *, key: str | None = None) -> Any:
    """Publish an event in the caller's transaction.

    >>> publish_event("order.paid", {"order_id": 7}, key="42")  # doctest: +SKIP
    """
    from .verbs.events import publish_event as publish

    return publish(event, payload, key=key)


async def aenqueue(job_name: str, /, *args: Any, **kwargs: Any) -> "JobRun":
    """``enqueue`` for async views: ``run = await aenqueue("onboarding", user_id=42)``."""
    from asgiref.sync import sync_to_async

    return await sync_to_async(enqueue, thread_sensitive=True)(job_name, *args, **kwargs)


async def apublish_event(event: str, payload: Any = None, *, key: str | None = None) -> Any:
    """``publish_event`` for async views: ``await apublish_event("order.paid", {...})``."""
    from asgiref.sync import sync_to_async

    return await sync_to_async(publish_event, thread_sensitive=True)(event, payload, key=key)


def send(run_id: Any, topic: str, payload: Any = None) -> Any:
    """Send a message to one run, in the caller's transaction; the run's
    ``ctx.step.receive(name, topic)`` gets it (each message once, in the order sent).
    Raises ``RunNotFound`` for an unknown run, ``RunStateError`` for a finished one.

    >>> send(run.id, "approval", {"ok": True})  # doctest: +SKIP
    """
    from .verbs.messages import send as send_message

    return send_message(run_id, topic, payload)


async def asend(run_id: Any, topic: str, payload: Any = None) -> Any:
    """``send`` for async views: ``await asend(run.id, "approval", {"ok": True})``."""
    from asgiref.sync import sync_to_async

    return await sync_to_async(send, thread_sensitive=True)(run_id, topic, payload)


def publish_on(signal: Any, **options: Any) -> Any:
    """Turn a Django signal into published events; see ``events.publish_on``."""
    from .verbs.events import publish_on as connect

    return connect(signal, **options)
