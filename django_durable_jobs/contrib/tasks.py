"""A ``django.tasks`` backend (Django 6.0 or newer): tasks become durable runs.

.. code-block:: python

    TASKS = {
        "default": {
            "BACKEND": "django_durable_jobs.backends.DurableJobsBackend",
            "QUEUES": ["default", "emails"],
            "OPTIONS": {"retries": 3, "backoff": "2s", "timeout": "10m"},
        }
    }

Every ``@task`` function enqueued with ``.enqueue()`` is written as a ``JobRun`` of
the internal job ``django.tasks:<alias>`` (in the caller's transaction) and executed
by ``manage.py runjobs`` like any other run: retries with backoff, timeouts, leases,
the admin trace. ``get_result(id)`` reads the run back as a ``TaskResult``.

A task declared with ``takes_context=True`` receives a ``DurableTaskContext``: a
``TaskContext`` that also carries the run's step API, so the task can use durable
steps (``context.step.run``, ``sleep``, ``wait_for_event``, ...). Async tasks
(``async def``) are supported: their ``context.step`` is awaited
(``await context.step.run(...)``).

On Django 5.2 this module imports, and creating the backend raises
``ImproperlyConfigured`` saying that it needs Django 6.0.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from inspect import iscoroutinefunction
from typing import TYPE_CHECKING, Any

import django
from asgiref.sync import async_to_sync, sync_to_async
from django.apps import apps
from django.conf import settings
from django.core import checks
from django.core.exceptions import ImproperlyConfigured
from django.utils import timezone
from django.utils.module_loading import import_string

from .. import conf
from ..db.leases import LeaseOwner
from ..declare import Job, job
from ..definitions.registry import register_job
from ..engine.async_steps import AsyncSteps
from ..engine.attempt import JobContext
from ..engine.serialization import check_arguments_payload
from ..exceptions import InvalidPayload, UnknownJob
from ..models import JobRun, RunStatus, StepRecord
from .task_context import DurableTaskContext, asteps, executing, steps
from .task_errors import call_task, refused_as_django_refuses, task_errors

HAS_TASKS = django.VERSION >= (6, 0)

if TYPE_CHECKING or HAS_TASKS:
    from django.tasks import TaskResult, TaskResultStatus, task_backends
    from django.tasks.backends.base import BaseTaskBackend
    from django.tasks.base import Task
    from django.tasks.exceptions import InvalidTask, InvalidTaskBackend, TaskResultDoesNotExist
    from django.tasks.signals import task_enqueued
else:  # Django 5.2: stand-ins, so that this module imports and says what it needs
    BaseTaskBackend = object

log = logging.getLogger("django_durable_jobs.backends")

#: Runs of a backend alias belong to the job named ``JOB_PREFIX + alias``.
JOB_PREFIX = "django.tasks:"
#: One completed step per attempt records the worker that made it (``worker_ids``).
WORKER_STEP = "django.tasks:worker:"
OPTION_NAMES = ("retries", "backoff", "timeout", "step_timeout")
MAX_QUEUE_NAME = 100  # JobRun.queue

_STATUS: dict[str, str] = {
    RunStatus.QUEUED: "READY",
    RunStatus.RUNNING: "RUNNING",
    RunStatus.SLEEPING: "RUNNING",
    RunStatus.WAITING: "RUNNING",
    RunStatus.SUCCEEDED: "SUCCESSFUL",
    RunStatus.FAILED: "FAILED",
    RunStatus.CANCELLED: "FAILED",
}


class DurableJobsBackend(BaseTaskBackend):
    """Run ``django.tasks`` tasks as durable runs executed by ``manage.py runjobs``.

    ``OPTIONS`` takes the policy of ``@job`` for every task of this backend:
    ``retries`` (default ``DURABLE_JOBS["RETRIES"]``), ``backoff``, ``timeout``,
    ``step_timeout``.
    """

    supports_defer = True
    supports_priority = True
    supports_get_result = True
    # An async task is awaited on an event loop of its own, from the worker's main
    # thread (its database work comes back to that thread, as with sync_to_async).
    supports_async_task = True

    def __init__(self, alias: str, params: dict[str, Any]) -> None:
        if not HAS_TASKS:
            raise ImproperlyConfigured(
                "django_durable_jobs.backends.DurableJobsBackend needs Django 6.0 or newer "
                f"(django.tasks); this is Django {django.get_version()}. On Django 5.2 "
                "use @job from django_durable_jobs instead."
            )
        super().__init__(alias, params)
        unknown = sorted(set(self.options) - set(OPTION_NAMES))
        if unknown:
            raise InvalidTaskBackend(
                f"TASKS[{alias!r}]['OPTIONS']: unknown option(s) {', '.join(unknown)}; "
                f"known: {', '.join(OPTION_NAMES)}"
            )
        self.job_name = f"{JOB_PREFIX}{alias}"
        # Registered again by every instance (one per thread): same function, same name.
        self.job: Job = job(
            name=self.job_name,
            retries=self.options.get("retries"),
            backoff=self.options.get("backoff"),
            timeout=self.options.get("timeout"),
            step_timeout=self.options.get("step_timeout"),
        )(run_task)

    def validate_task(self, task: Task[Any, Any]) -> None:
        super().validate_task(task)
        if len(task.queue_name) > MAX_QUEUE_NAME:
            raise InvalidTask(
                f"Queue name {task.queue_name!r} is longer than {MAX_QUEUE_NAME} characters."
            )

    def enqueue(self, task: Task[Any, Any], args: Any, kwargs: Any) -> TaskResult[Any, Any]:
        """Write a queued run in the caller's transaction and send ``task_enqueued``."""
        self.validate_task(task)
        path = _importable(task)
        limit = int(conf.get("MAX_PAYLOAD_BYTES"))
        # "argument 0['items']", as job.enqueue names it (not "the arguments[0]").
        try:
            clean_args, clean_kwargs = check_arguments_payload(
                f"task {path!r}: ", args, kwargs, limit=limit
            )
        except InvalidPayload as exc:
            raise refused_as_django_refuses(exc, args, kwargs) from None
        run_after = _aware(task.run_after)
        run = self.job.using(
            queue=task.queue_name, priority=task.priority, run_after=run_after
        ).enqueue(
            task=path,
            args=clean_args,
            kwargs=clean_kwargs,
            run_after=run_after.isoformat() if isinstance(run_after, datetime) else None,
        )
        result = self.result_of(run, task=task, workers=[])
        send(task_enqueued, self, result)
        return result

    def get_result(self, result_id: str) -> TaskResult[Any, Any]:
        """The run ``result_id`` as a ``TaskResult``; ``TaskResultDoesNotExist`` if it is
        not a run of this backend."""
        try:
            pk = uuid.UUID(str(result_id))
        except ValueError:
            raise TaskResultDoesNotExist(result_id) from None
        run = JobRun.objects.using(conf.database()).filter(pk=pk, job_name=self.job_name).first()
        if run is None:
            raise TaskResultDoesNotExist(result_id)
        return self.result_of(run)

    def result_of(
        self,
        run: JobRun,
        *,
        task: Task[Any, Any] | None = None,
        workers: list[tuple[str, datetime]] | None = None,
    ) -> TaskResult[Any, Any]:
        """Map a run of this backend to a ``TaskResult`` (``workers``: (id, time) per
        attempt, read from the run's worker steps when not given)."""
        stored = dict(run.kwargs)
        if task is None:
            task = self._task(run, stored)
        if workers is None:
            workers = worker_steps(run)
        status = TaskResultStatus(_STATUS[run.status])
        result: TaskResult[Any, Any] = TaskResult(
            task=task,
            id=str(run.id),
            status=status,
            enqueued_at=run.created_at,
            started_at=run.started_at,
            finished_at=run.finished_at,
            last_attempted_at=workers[-1][1] if workers else None,
            args=list(stored.get("args", [])),
            kwargs=dict(stored.get("kwargs", {})),
            backend=self.alias,
            errors=task_errors(run),
            worker_ids=[worker for worker, _ in workers],
        )
        if status == TaskResultStatus.SUCCESSFUL:
            object.__setattr__(result, "_return_value", run.result)
        return result

    def check(self, **kwargs: Any) -> list[checks.CheckMessage]:
        if apps.is_installed("django_durable_jobs"):
            return []
        return [
            checks.Error(
                f"TASKS[{self.alias!r}] uses DurableJobsBackend but django_durable_jobs is "
                "not installed.",
                hint='Add "django_durable_jobs" to INSTALLED_APPS and run migrate.',
                id="django_durable_jobs.E040",
            )
        ]

    def _task(self, run: JobRun, stored: dict[str, Any]) -> Task[Any, Any]:
        task = _import_task(str(stored.get("task", "")), str(run.id))
        run_after = stored.get("run_after")
        try:
            return task.using(
                queue_name=run.queue,
                priority=run.priority,
                backend=self.alias,
                run_after=datetime.fromisoformat(run_after) if run_after else None,
            )
        except (InvalidTask, InvalidTaskBackend):  # settings changed since the enqueue
            return task


def send(signal: Any, backend: DurableJobsBackend, result: TaskResult[Any, Any]) -> None:
    """Send a ``django.tasks`` signal about ``result``."""
    # Robust: a failing receiver must not take the worker down (Django's log receivers
    # are always connected).
    for receiver, outcome in signal.send_robust(sender=type(backend), task_result=result):
        if isinstance(outcome, Exception):
            log.error("task signal receiver %r failed: %r", receiver, outcome, exc_info=outcome)


def run_task(
    ctx: JobContext,
    task: str,
    args: list[Any],
    kwargs: dict[str, Any],
    run_after: str | None = None,
) -> Any:
    """The job behind every task: import the task by its path and call it."""
    definition = _import_task(task, ctx.run_id)
    ctx.step.run(f"{WORKER_STEP}{ctx.attempt}", worker_id, ctx.run_id)
    if not definition.takes_context:
        return call_task(ctx, task, lambda: _call(definition, args, kwargs))
    backend = task_backends[ctx.job_name.removeprefix(JOB_PREFIX)]
    assert isinstance(backend, DurableJobsBackend)
    twin = (
        AsyncSteps.twin(ctx.step, io=_main_thread) if iscoroutinefunction(definition.func) else None
    )
    context = DurableTaskContext(
        task_result=backend.result_of(_current_run(ctx.run_id), task=definition),
        step=twin or ctx.step,
        run_id=ctx.run_id,
        logger=ctx.logger,
        progress=ctx.progress,
    )
    if twin is not None:
        return call_task(ctx, task, lambda: _await(ctx, twin, definition, (context, *args), kwargs))
    return call_task(ctx, task, lambda: _call(definition, (context, *args), kwargs))


def _call(definition: Task[Any, Any], args: Sequence[Any], kwargs: dict[str, Any]) -> Any:
    if iscoroutinefunction(definition.func):
        return async_to_sync(definition.func)(*args, **kwargs)
    return definition.func(*args, **kwargs)


def _await(
    ctx: JobContext,
    step: AsyncSteps,
    definition: Task[Any, Any],
    args: Sequence[Any],
    kwargs: dict[str, Any],
) -> Any:
    """Await an async task whose steps are ``step`` (the attempt's twin) with the checks
    ``arun_attempt`` makes for an async job: a step call never awaited fails the run
    (``check_awaited``), and a suspension the task caught is handed to the attempt's
    own step API, whose ``suspended`` ``run_attempt`` reads once the task returns."""

    async def attempt() -> Any:
        try:
            value = await definition.func(*args, **kwargs)
            step.check_awaited()
            return value
        finally:
            step.check_awaited(fail=False)  # it raised: close those calls, no more

    try:
        return async_to_sync(attempt)()
    finally:
        ctx.step.suspended = ctx.step.suspended or step.suspended


async def _main_thread(work: Callable[[], Any]) -> Any:
    """Database work of an async task, back on the thread that runs the job."""
    return await sync_to_async(work, thread_sensitive=True)()


def install() -> None:
    """Create every ``TASKS`` backend of this kind, registering its job in this process.

    The app's ``ready()`` calls it, so that a worker that never enqueues a task can
    still execute the runs of every backend alias.
    """
    if not HAS_TASKS:
        return
    for alias, params in getattr(settings, "TASKS", {}).items():
        try:
            backend_class = import_string(params.get("BACKEND", ""))
        except ImportError:
            continue  # Django reports it when the backend is first used
        if isinstance(backend_class, type) and issubclass(backend_class, DurableJobsBackend):
            backend = task_backends[alias]
            assert isinstance(backend, DurableJobsBackend)
            register_job(backend.job)


def worker_steps(run: JobRun) -> list[tuple[str, datetime]]:
    """(worker id, start) of every attempt of a task run, oldest first."""
    rows = (
        StepRecord.objects.using(conf.database())
        .filter(run=run, name__startswith=WORKER_STEP)
        .order_by("id")
        .values_list("output", "started_at")
    )
    return [(str(output), started_at) for output, started_at in rows]


# -- helpers -----------------------------------------------------------------------


def _importable(task: Task[Any, Any]) -> str:
    """The path a worker imports the task from; it must lead back to this task."""
    path = task.module_path
    try:
        found = import_string(path)
    except ImportError:
        found = None
    if not isinstance(found, Task) or found.func is not task.func:
        raise InvalidTask(
            f"Task {path!r} cannot be imported by that path: a worker could not find it. "
            "Decorate a module-level function with @task and keep its name."
        )
    return path


def _import_task(path: str, run_id: str) -> Task[Any, Any]:
    try:
        found = import_string(path)
    except ImportError as exc:
        found, reason = None, str(exc)
    else:
        reason = f"it is a {type(found).__name__}, not a Task"
    if not isinstance(found, Task):
        raise UnknownJob(
            f"run {run_id}: task {path!r} cannot be imported on this worker ({reason}); "
            "was it renamed or its module not deployed?"
        )
    return found


def _aware(when: datetime | timedelta | None) -> datetime | timedelta | None:
    if isinstance(when, datetime) and timezone.is_naive(when):
        return timezone.make_aware(when)  # USE_TZ=False: local time, as Django means it
    return when


def worker_id(run_id: str) -> str:
    run = executing.get()
    if run is not None and str(run.id) == run_id:
        owner = run.lease_owner
    else:
        owner = (
            JobRun.objects.using(conf.database())
            .filter(pk=run_id)
            .values_list("lease_owner", flat=True)
            .first()
        ) or ""
    return LeaseOwner.parse(owner).worker_id or "inline"


def _current_run(run_id: str) -> JobRun:
    run = executing.get()
    if run is not None and str(run.id) == run_id:
        return run
    return JobRun.objects.using(conf.database()).get(pk=run_id)


__all__ = ["DurableJobsBackend", "DurableTaskContext", "asteps", "install", "steps"]
