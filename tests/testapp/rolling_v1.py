"""The old deploy of a rolling deploy (tests/processes/worker/test_rolling_deploy.py): a
worker with ``DURABLE_JOBS["JOB_MODULES"] = ["jobs", "rolling_v1"]`` registers version 1
of ``tests.rolling`` only. Each step leaves an ``Effect`` named after the worker that
executed it (``ROLLING_ROLE`` in its environment), so a step run twice, or by a worker
that should not have taken the run, shows."""

from __future__ import annotations

from typing import Any

from django_durable_jobs import job

from .rolling import NAME, step_by_worker


@job(name=NAME, retries=3, backoff=0)
def rolling_v1(ctx: Any) -> dict[str, Any]:
    first = ctx.step.run("one", step_by_worker, "one", ctx.run_id)
    ctx.step.sleep("nap", "2s")  # across the deploy
    second = ctx.step.run("two", step_by_worker, "two", ctx.run_id)
    return {"version": 1, "by": [first, second]}
