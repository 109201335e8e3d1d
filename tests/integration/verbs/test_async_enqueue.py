"""The async twins of enqueue and publish, as an async view calls them."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from django.db import transaction

from django_durable_jobs import UnknownJob, aenqueue, apublish_event
from django_durable_jobs.models import Event, JobRun, RunStatus
from tests.testapp import async_jobs, jobs

pytestmark = pytest.mark.django_db(transaction=True)


def test_every_enqueue_has_an_async_twin() -> None:
    async def view() -> list[JobRun]:
        return [
            await jobs.add.aenqueue(1, b=2),
            await jobs.onboarding.using(queue="mail", priority=5).aenqueue(user_id=7),
            await aenqueue("tests.add", 3, 4),
            await async_jobs.async_io.aenqueue(0.1, tag="é"),
        ]

    runs = async_to_sync(view)()
    stored = {run.pk: run for run in JobRun.objects.all()}
    assert [stored[run.pk].job_name for run in runs] == [
        "tests.add",
        "tests.onboarding",
        "tests.add",
        "tests.async_io",
    ]
    assert stored[runs[1].pk].queue == "mail" and stored[runs[1].pk].priority == 5
    assert stored[runs[0].pk].kwargs == {"b": 2} and stored[runs[0].pk].status == RunStatus.QUEUED
    assert stored[runs[3].pk].kwargs == {"tag": "é"}


def test_async_enqueue_raises_the_same_typed_errors() -> None:
    async def view() -> None:
        await aenqueue("tests.ad", 1, 2)

    with pytest.raises(UnknownJob, match=r"tests\.add"):
        async_to_sync(view)()
    assert not JobRun.objects.exists()


def test_apublish_event_wakes_the_waiting_run() -> None:
    async def view() -> Any:
        return await apublish_event("order.paid", {"order_id": 7}, key="42")

    event = async_to_sync(view)()
    assert Event.objects.get().pk == event.pk and event.payload == {"order_id": 7}


def test_async_enqueue_joins_a_transaction_opened_on_the_same_thread() -> None:
    from asgiref.sync import sync_to_async

    def in_transaction() -> None:
        with transaction.atomic():
            async_to_sync(jobs.add.aenqueue)(1, 2)
            raise RuntimeError("roll back")

    async def view() -> None:
        await sync_to_async(in_transaction, thread_sensitive=True)()

    with pytest.raises(RuntimeError):
        async_to_sync(view)()
    assert not JobRun.objects.exists()  # rolled back with the caller's transaction


def test_a_sync_enqueue_in_an_async_view_raises_djangos_error_and_warns_of_nothing(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """It logged "cannot read the database's clock (You cannot call this from an async
    context...)" at WARNING first, a clock problem that is not one."""
    from django.core.exceptions import SynchronousOnlyOperation

    from django_durable_jobs.engine import clock

    async def view() -> None:
        clock.current().measure()  # type: ignore[attr-defined]
        jobs.add.enqueue(1, 2)

    with caplog.at_level(logging.WARNING), pytest.raises(SynchronousOnlyOperation):
        async_to_sync(view)()
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []
    assert not JobRun.objects.exists()
