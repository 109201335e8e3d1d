"""Which runs go to a worker's async lane, and how large the lane is: runs of
``async def`` jobs, up to ``--async-concurrency`` (``ASYNC_CONCURRENCY``) in flight, with
``ASYNC_CONNECTIONS`` database threads (``lane.py``)."""

from __future__ import annotations

from typing import Any

from .. import conf
from ..definitions.registry import all_jobs, get_job
from ..exceptions import UnknownJob
from ..models import JobRun


def is_async_run(run: JobRun) -> bool:
    """Whether ``run``'s job is ``async def`` (an unknown job is not: the sync path
    fails it with X_JOB_UNKNOWN)."""
    try:
        return get_job(run.job_name, run.job_version).is_async
    except UnknownJob:
        return False


def any_async(jobs: dict[str, Any]) -> bool:
    """Whether any registered job is ``async def`` (a worker without them has no lane)."""
    return any(definition.is_async for definition in jobs.values())


def lane_capacity(async_concurrency: int | None) -> int:
    """Async runs one worker process has in flight at once (``--async-concurrency``, else
    ``ASYNC_CONCURRENCY``); 0: no lane (below 1, or no async job registered)."""
    if async_concurrency is None:
        async_concurrency = int(conf.get("ASYNC_CONCURRENCY"))
    return async_concurrency if async_concurrency >= 1 and any_async(all_jobs()) else 0


def lane_threads(capacity: int) -> int:
    """The database threads a lane of ``capacity`` asks for (``ASYNC_CONNECTIONS``); 0
    without a lane. Django's pool may give it fewer (``connections.fit_to_pool``)."""
    return int(conf.get("ASYNC_CONNECTIONS")) if capacity else 0
