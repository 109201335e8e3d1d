"""The ``django.tasks`` backend's validation and options, without a database
(Django >= 6.0)."""

from __future__ import annotations

import asyncio
from datetime import datetime
from typing import Any

import django
import pytest

from django_durable_jobs import InvalidPayload

HAS_TASKS = django.VERSION >= (6, 0)
needs_tasks = pytest.mark.skipif(not HAS_TASKS, reason="django.tasks needs Django 6.0 or newer")

if HAS_TASKS:
    from django.tasks import TaskContext, task, task_backends
    from django.tasks.backends.dummy import DummyBackend
    from django.tasks.exceptions import InvalidTask, InvalidTaskBackend

    from django_durable_jobs.contrib.tasks import DurableJobsBackend, install, steps
    from django_durable_jobs.definitions.registry import get_job, unregister
    from tests.testapp import tasks


@needs_tasks
def test_validate_task_follows_django() -> None:
    async def coroutine() -> None:
        return None

    def no_context(order_id: int) -> None:
        return None

    with pytest.raises(InvalidTask, match="not valid"):
        tasks.add.using(queue_name="nope")
    with pytest.raises(InvalidTask, match="priority"):
        tasks.add.using(priority=101)
    with pytest.raises(InvalidTask, match="module level"):
        task(no_context)
    with pytest.raises(InvalidTask, match="aware"):
        tasks.add.using(run_after=django.utils.timezone.now().replace(tzinfo=None))
    with pytest.raises(InvalidTask, match="longer than 100"):
        tasks.elsewhere.using(queue_name="q" * 101)
    backend = task_backends["default"]
    assert backend.supports_defer and backend.supports_priority and backend.supports_get_result
    assert backend.supports_async_task  # test_backend_async.py


@needs_tasks
def test_options_are_the_job_policy_and_unknown_options_fail() -> None:
    assert get_job("django.tasks:default").retries == 1
    assert get_job("django.tasks:other").retries is None  # DURABLE_JOBS["RETRIES"]
    with pytest.raises(InvalidTaskBackend, match="unknown option"):
        DurableJobsBackend("broken", {"OPTIONS": {"retry": 3}})


@needs_tasks
def test_steps_of_a_plain_context_is_a_type_error() -> None:
    with pytest.raises(TypeError, match="takes_context=True"):
        steps(TaskContext(task_result=None))  # type: ignore[arg-type]


@needs_tasks
def test_install_registers_the_job_of_every_alias() -> None:
    unregister("django.tasks:other")
    install()
    assert get_job("django.tasks:other").fn.__name__ == "run_task"


@needs_tasks
def test_check_says_when_the_app_is_not_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    from django.apps import apps

    backend = task_backends["default"]
    assert backend.check() == []
    monkeypatch.setattr(apps, "is_installed", lambda name: False)
    assert [message.id for message in backend.check()] == ["django_durable_jobs.E040"]


#: Arguments of ``tasks.add`` that django.tasks cannot store, and where ours says the
#: value is: Django's backends raise TypeError("Unsupported type: ...") for a type JSON
#: has not, ValueError("Unsupported value: ...") for bytes that are not UTF-8.
UNSUPPORTED = [
    ((1, datetime(2026, 1, 5, 9, 0)), {}, "argument 1"),
    ((1,), {"b": {"when": [datetime(2026, 1, 5, 9, 0)]}}, "argument 'b'['when'][0]"),
    ((b"\xff", 2), {}, "argument 0"),
]


@needs_tasks
@pytest.mark.parametrize(
    ("args", "kwargs", "where"), UNSUPPORTED, ids=["type", "type-inside", "value"]
)
def test_a_value_django_tasks_cannot_store_is_refused_as_djangos_backends_refuse_it(
    args: tuple[Any, ...], kwargs: dict[str, Any], where: str
) -> None:
    """Code written against Django's backends (Django's own tests/tasks) catches the
    type they raise and looks for their words; ours also names where the value is."""
    dummy = DummyBackend("dummy", {"QUEUES": [], "OPTIONS": {}})
    with pytest.raises((TypeError, ValueError)) as djangos:
        dummy.enqueue(tasks.add, list(args), kwargs)
    for enqueue in (tasks.add.enqueue, lambda *a, **k: asyncio.run(tasks.add.aenqueue(*a, **k))):
        with pytest.raises(InvalidPayload) as ours:
            enqueue(*args, **kwargs)
        assert isinstance(ours.value, type(djangos.value))
        message = str(ours.value)
        assert message.startswith(
            f"task 'tests.testapp.tasks.add': {where} cannot be stored as JSON"
        )
        assert str(djangos.value) in message  # "Unsupported type: <class 'datetime.datetime'>"
