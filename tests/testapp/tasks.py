"""django.tasks tasks for tests/*/test_backend.py (Django >= 6.0 only: not autodiscovered)."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from django.tasks import TaskContext, task

from django_durable_jobs.contrib.tasks import DurableTaskContext, asteps, steps

from .jobs import CALLS, effect


@task
def add(a: int, b: int) -> int:
    CALLS["tasks.add"] += 1
    return a + b


@task(queue_name="emails", priority=10)
def send_email(to: str, *, subject: str = "hi") -> str:
    CALLS["tasks.send_email"] += 1
    return f"{subject} -> {to}"


@task
def fails(message: str) -> None:
    CALLS["tasks.fails"] += 1
    raise ValueError(message)


@task(takes_context=True)
def durable(context: TaskContext[Any, Any], order_id: int) -> dict[str, Any]:
    step = steps(context)  # typed: the context is a DurableTaskContext
    assert isinstance(context, DurableTaskContext)
    charged = step.run("charge", effect, f"charge-{order_id}", context.run_id)
    step.sleep("settle", "1h")
    confirmed = context.step.run("confirm", effect, f"confirm-{order_id}", context.run_id)
    return {
        "charged": charged,
        "confirmed": confirmed,
        "attempt": context.attempt,
        "result_id": context.task_result.id,
    }


@task(takes_context=True)
def swallows_sleep(context: TaskContext[Any, Any]) -> str:
    with contextlib.suppress(BaseException):  # the mistake under test
        steps(context).sleep("nap", "1h")
    return "woke early"


@task(takes_context=True)
def flaky(context: TaskContext[Any, Any]) -> int:
    steps(context).run("before", effect, "flaky-before")
    if context.attempt == 1:
        raise RuntimeError("first attempt fails")
    return context.attempt


@task(backend="other", queue_name="anything")
def elsewhere() -> str:
    return "other backend"


@task
def not_json() -> object:
    return {1, 2}


# -- async tasks (supports_async_task) ------------------------------------------------


@task
async def async_add(a: int, b: int) -> int:
    await asyncio.sleep(0)
    CALLS["tasks.async_add"] += 1
    return a + b


@task
async def async_fails(message: str) -> None:
    await asyncio.sleep(0)
    raise ValueError(message)


@task(takes_context=True)
async def async_durable(context: TaskContext[Any, Any], order_id: int) -> dict[str, Any]:
    step = asteps(context)  # typed: the awaited step API
    charged = await step.run("charge", effect, f"async-charge-{order_id}", step.run_id)
    fetched = await step.run("fetch", _fetch, order_id)
    await step.sleep("settle", "1h")
    return {"charged": charged, "fetched": fetched, "attempt": context.attempt}


async def _fetch(order_id: int) -> str:
    await asyncio.sleep(0)
    CALLS[f"async-fetch-{order_id}"] += 1
    return f"fetched-{order_id}"


@task(takes_context=True)
async def async_swallows_sleep(context: TaskContext[Any, Any]) -> str:
    with contextlib.suppress(BaseException):  # the mistake under test
        await asteps(context).sleep("nap", "1h")
    return "woke early"


@task(takes_context=True)
async def async_forgot_await(context: TaskContext[Any, Any], returned: bool) -> Any:
    """A step called without ``await``: its coroutine is made and dropped, or returned
    as the task's value."""
    step = asteps(context)
    pending = step.run("send", effect, "task-sent", step.run_id)
    if returned:
        return pending
    await step.run("after", effect, "task-after", step.run_id)
    return "done"


@task(takes_context=True)
def counted(context: TaskContext[Any, Any], total: int) -> int:
    for done in range(1, total + 1):
        context.set_progress({"done": done, "total": total})  # type: ignore[attr-defined]
    return total


@task(takes_context=True)
async def acounted(context: TaskContext[Any, Any], total: int) -> int:
    for done in range(1, total + 1):
        context.set_progress({"done": done, "total": total})  # type: ignore[attr-defined]
        await asyncio.sleep(0)
    return total
