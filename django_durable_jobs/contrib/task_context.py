"""The ``context`` a ``takes_context=True`` task receives from ``DurableJobsBackend``,
and the typed ways to its step API (``steps``, ``asteps``)."""

from __future__ import annotations

import logging
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import django

from ..engine.async_steps import AsyncSteps
from ..engine.progress import Progress
from ..engine.sync_steps import Steps
from ..models import JobRun

if TYPE_CHECKING or django.VERSION >= (6, 0):
    from django.tasks import TaskContext
else:  # Django 5.2: a stand-in, so that this module imports
    TaskContext = object

#: The run this thread is executing, set when it starts (saves a read per attempt).
executing: ContextVar[JobRun | None] = ContextVar("django_durable_jobs_task_run", default=None)


# frozen at run time like its base (the stubs say otherwise); not generic at run time.
@dataclass(frozen=True, slots=True, kw_only=True)
class DurableTaskContext(TaskContext):  # type: ignore[misc,type-arg]
    """The ``context`` of a ``takes_context=True`` task run by ``DurableJobsBackend``:
    a ``TaskContext`` that also carries the run's durable step API. Annotate the
    parameter as Django's ``TaskContext`` and use ``steps(context)`` for a typed
    ``Steps``:

    >>> @task(takes_context=True)  # doctest: +SKIP
    ... def charge(context: TaskContext, order_id: int) -> str:
    ...     step = steps(context)  # the same object as context.step
    ...     receipt = step.run("charge", payments.charge, order_id)
    ...     step.sleep("settle", "1h")  # the worker is free meanwhile
    ...     return step.run("confirm", payments.confirm, receipt)
    """

    #: ``Steps``; for an ``async def`` task, ``AsyncSteps`` (awaited).
    step: Steps | AsyncSteps
    run_id: str
    logger: logging.Logger
    #: The attempt's progress (``set_progress``).
    progress: Progress = field(default_factory=Progress)

    def set_progress(self, value: Any) -> None:
        """``ctx.set_progress`` of jobs: ``value`` (JSON) becomes the run's progress,
        shown by the admin and ``jobs show``; coalesced, last write wins."""
        self.progress.set(value)


def steps(context: Any) -> Steps:
    """The step API of the run executing a task: ``steps(context).run("charge", fn)``.

    For code typed against Django's ``TaskContext``; equal to ``context.step``.
    """
    step = getattr(context, "step", None)
    if not isinstance(step, Steps):
        raise TypeError(
            "durable steps need a task with takes_context=True running on "
            "django_durable_jobs.backends.DurableJobsBackend; got context "
            f"{type(context).__name__}"
        )
    return step


def asteps(context: Any) -> AsyncSteps:
    """The awaited step API of the run executing an ``async def`` task:
    ``await asteps(context).run("charge", fn)``; equal to ``context.step``."""
    step = getattr(context, "step", None)
    if not isinstance(step, AsyncSteps):
        raise TypeError(
            "awaited durable steps need an async def task with takes_context=True running "
            f"on django_durable_jobs.backends.DurableJobsBackend; got context "
            f"{type(context).__name__}"
        )
    return step
