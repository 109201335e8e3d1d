"""``django.tasks``' signals (``task_started``, ``task_finished``), sent for the runs of
``DurableJobsBackend`` from the app's own run signals. ``connect()`` is called by the
app's ``ready()`` on Django 6.0 or newer."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from .. import signals
from ..engine import clock
from ..models import JobRun, RunStatus
from .task_context import executing
from .task_errors import RecordedFailure, recorded_failure
from .tasks import HAS_TASKS, JOB_PREFIX, DurableJobsBackend, send, worker_id, worker_steps

if TYPE_CHECKING or HAS_TASKS:
    from django.tasks import TaskResultStatus, task_backends
    from django.tasks.exceptions import InvalidTaskBackend
    from django.tasks.signals import task_finished, task_started

log = logging.getLogger("django_durable_jobs.backends")


def _backend_of(run: JobRun) -> DurableJobsBackend | None:
    if not run.job_name.startswith(JOB_PREFIX):
        return None
    try:
        backend = task_backends[run.job_name.removeprefix(JOB_PREFIX)]
    except InvalidTaskBackend:
        log.warning("run %s: no TASKS alias for job %r; no task signal sent", run.id, run.job_name)
        return None
    return backend if isinstance(backend, DurableJobsBackend) else None


def _announce(run: JobRun, signal: Any, *, starting: bool = False) -> None:
    backend = _backend_of(run)
    if backend is None:
        return
    try:
        workers = worker_steps(run)
        if starting:
            workers.append((worker_id(str(run.id)), clock.current().now()))
        result = backend.result_of(run, workers=workers)
    except Exception:
        log.exception("run %s: cannot build its TaskResult; no task signal sent", run.id)
        return
    if starting:
        object.__setattr__(result, "status", TaskResultStatus.RUNNING)
    if signal is task_finished and result.status == TaskResultStatus.FAILED:
        # Django's log_task_finished logs sys.exc_info(): send it with the failure in hand.
        try:
            raise recorded_failure(run)
        except RecordedFailure:
            send(signal, backend, result)
        return
    send(signal, backend, result)


def _on_run_started(sender: Any, run: JobRun, **kwargs: Any) -> None:
    if not run.job_name.startswith(JOB_PREFIX):
        return
    executing.set(run)
    if run.claimed_from == RunStatus.QUEUED:  # a new attempt (the model says QUEUED by default)
        _announce(run, task_started, starting=True)


def _on_run_finished(sender: Any, run: JobRun, **kwargs: Any) -> None:
    if run.job_name.startswith(JOB_PREFIX):
        _announce(run, task_finished)


def _on_run_failed(sender: Any, run: JobRun, will_retry: bool = False, **kwargs: Any) -> None:
    if run.job_name.startswith(JOB_PREFIX) and not will_retry:
        _announce(run, task_finished)


def connect() -> None:
    receivers = [
        (signals.run_started, _on_run_started, "durable_jobs.tasks.started"),
        (signals.run_succeeded, _on_run_finished, "durable_jobs.tasks.succeeded"),
        (signals.run_failed, _on_run_failed, "durable_jobs.tasks.failed"),
        # A cancelled run is finished too: its TaskResult is FAILED.
        (signals.run_cancelled, _on_run_finished, "durable_jobs.tasks.cancelled"),
    ]
    for signal, receiver, uid in receivers:
        signal.connect(receiver, dispatch_uid=uid)
        signals.only_for(uid, JOB_PREFIX)  # each returns at once for other runs
