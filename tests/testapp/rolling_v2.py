"""The new deploy of a rolling deploy: version 2 of ``tests.rolling`` and a job the old
deploy does not have, ``tests.rolling_added``. A worker with ``JOB_MODULES = ["jobs",
"rolling_v1", "rolling_v2"]`` keeps version 1 too; one with ``["jobs", "rolling_v2"]``
has removed it."""

from __future__ import annotations

from typing import Any

from django_durable_jobs import job

from .rolling import NAME, step_by_worker


@job(name=NAME, version=2, retries=3, backoff=0)
def rolling_v2(ctx: Any) -> dict[str, Any]:
    first = ctx.step.run("one", step_by_worker, "one", ctx.run_id)
    ctx.step.sleep("nap", "1s")
    second = ctx.step.run("two-v2", step_by_worker, "two-v2", ctx.run_id)
    return {"version": 2, "by": [first, second]}


@job(name="tests.rolling_added", retries=3, backoff=0)
def rolling_added(ctx: Any) -> dict[str, Any]:
    first = ctx.step.run("one", step_by_worker, "one", ctx.run_id)
    ctx.step.sleep("nap", "1s")
    second = ctx.step.run("two", step_by_worker, "two", ctx.run_id)
    return {"version": 1, "by": [first, second]}
