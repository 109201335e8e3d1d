"""``@job(on_failure=...)``: one handler run per run that finally failed or was cancelled.

The handler run is written in the same transaction as the status change, under the
idempotency key ``on_failure:<run id>``: a crash cannot lose it, and two workers (or
an operator and a worker) racing on one run cannot start it twice.
"""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Any

from ..definitions.registry import JobDefinition, JobOptions, find_job, get_job
from ..exceptions import UnknownJob
from ..models import JobRun, RunStatus
from .enqueue import enqueue_job

log = logging.getLogger("django_durable_jobs.worker")

#: The idempotency key prefix of handler runs; a handler's own failure starts nothing.
PREFIX = "on_failure:"


def handler_for(run: JobRun) -> JobDefinition | None:
    """The ``on_failure`` job of ``run``'s job, or None (none set, or ``run`` is a handler)."""
    if (run.idempotency_key or "").startswith(PREFIX):
        return None
    try:  # the run's own version's, else the job's latest
        name = (find_job(run.job_name, run.job_version) or get_job(run.job_name)).on_failure
    except UnknownJob:
        return None
    if name is None:
        return None
    try:
        return get_job(name)
    except UnknownJob as exc:
        log.error("run %s: on_failure handler of job %r: %s", run.pk, run.job_name, exc)
        return None


def start_handler(run: JobRun, values: dict[str, Any], now: datetime) -> JobRun | None:
    """Enqueue the handler of ``run``, which just got ``values`` (status, error...).

    Call it inside the transaction that writes ``values``.
    """
    handler = handler_for(run)
    if handler is None or values.get("status") not in (RunStatus.FAILED, RunStatus.CANCELLED):
        return None
    failure = {
        "run_id": str(run.pk),
        "job_name": run.job_name,
        "status": str(values["status"]),
        "error_code": values.get("error_code", run.error_code),
        "error": values.get("error", run.error),
        "args": run.args,
        "kwargs": run.kwargs,
    }
    options = JobOptions(idempotency_key=f"{PREFIX}{run.pk}")
    return enqueue_job(handler, (failure,), {}, options, now=now)
