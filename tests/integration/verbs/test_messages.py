"""``send`` and ``step.receive`` on the database, through the worker's own execution: a
message is written in the sender's transaction, kept until received, received once
each in the order sent, and its commit wakes the receiving run at once."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from django.db import transaction

from django_durable_jobs import (
    InvalidName,
    InvalidPayload,
    RunNotFound,
    RunStateError,
    asend,
    send,
)
from django_durable_jobs.engine.clock import FakeClock
from django_durable_jobs.models import JobRun, Message, RunStatus, StepRecord, StepStatus
from django_durable_jobs.verbs.runs import replay_from
from tests.conftest import Driver
from tests.testapp import jobs, message_jobs
from tests.testapp.models import Effect

pytestmark = pytest.mark.django_db(transaction=True)


def _decision(run: JobRun) -> Any:
    assert isinstance(run.result, dict), run.result
    return run.result["decision"]


def parked(driver: Driver, run: JobRun) -> JobRun:
    driver.step(run)
    run.refresh_from_db()
    assert run.status == RunStatus.WAITING
    return run


def test_a_message_sent_to_a_waiting_run_wakes_it_at_once_and_is_received(
    driver: Driver, clock: FakeClock
) -> None:
    run = parked(driver, message_jobs.approval.enqueue(7))
    assert run.wake_at is not None and run.wake_at > clock.now()  # parked until its poll
    send(run.id, "approval", {"ok": True})
    run.refresh_from_db()
    assert run.wake_at == clock.now()  # runnable now, not at the 30 s poll
    driver.step(run)
    run.refresh_from_db()
    assert run.status == RunStatus.SUCCEEDED
    assert run.result == {"order_id": 7, "decision": {"ok": True}}
    message = Message.objects.get()
    assert (message.step, message.received_at) == ("decision", clock.now())
    # Each step's side effect once: the receive did not run "ask" again.
    assert sorted(Effect.objects.values_list("name", flat=True)) == ["after-7", "ask-7"]


def test_a_message_sent_before_the_receive_started_is_kept_for_it(driver: Driver) -> None:
    run = message_jobs.approval.enqueue(8)
    send(run.id, "approval", "early")
    driver.step(run)
    run.refresh_from_db()
    assert run.status == RunStatus.SUCCEEDED and _decision(run) == "early"


def test_messages_are_received_once_each_in_the_order_sent(driver: Driver) -> None:
    run = message_jobs.inbox.enqueue(3)
    other = message_jobs.inbox.enqueue(1)
    for n in (1, 2, 3, 4):
        send(run.id, "item", n)
    send(run.id, "else", "another topic")
    send(other.id, "item", "another run")
    driver.drain()
    run.refresh_from_db()
    other.refresh_from_db()
    assert run.result == [1, 2, 3] and other.result == ["another run"]
    taken = Message.objects.filter(run=run).order_by("id")
    assert list(taken.values_list("payload", "step")) == [
        (1, "take0"),
        (2, "take1"),
        (3, "take2"),
        (4, ""),  # kept: no receive took it
        ("another topic", ""),
    ]


def test_a_rolled_back_send_sends_nothing_and_wakes_nothing(driver: Driver) -> None:
    run = parked(driver, message_jobs.approval.enqueue(9))
    parked_until = run.wake_at

    def send_then_fail() -> None:
        with transaction.atomic():
            send(run.id, "approval", {"ok": True})
            raise RuntimeError("roll back")

    with pytest.raises(RuntimeError):
        send_then_fail()
    assert not Message.objects.exists()
    run.refresh_from_db()
    assert run.wake_at == parked_until


def test_a_send_committed_later_wakes_the_run_at_its_commit(
    driver: Driver, clock: FakeClock
) -> None:
    run = parked(driver, message_jobs.approval.enqueue(10))
    with transaction.atomic():
        send(run.id, "approval", "yes")
        clock.advance("1s")  # the run was woken in the sender's transaction
    run.refresh_from_db()
    assert run.wake_at is not None and run.wake_at <= clock.now()
    assert driver.step(run) is not None
    run.refresh_from_db()
    assert _decision(run) == "yes"


def test_a_receive_times_out_with_none_and_a_required_one_fails(
    driver: Driver, clock: FakeClock
) -> None:
    run = parked(driver, message_jobs.approval.enqueue(11))
    clock.advance("2d")
    driver.step(run)
    run.refresh_from_db()
    assert run.status == RunStatus.SUCCEEDED and _decision(run) is None
    must = parked(driver, message_jobs.required.enqueue())
    clock.advance("1h")
    driver.step(must)
    must.refresh_from_db()
    assert (must.status, must.error_code) == (RunStatus.FAILED, "X_JOB_TIMEOUT")


def test_send_refuses_an_unknown_run_a_finished_run_and_bad_input(driver: Driver) -> None:
    with pytest.raises(RunNotFound):
        send(uuid.uuid4(), "approval")
    done = jobs.noop.enqueue()
    driver.step(done)
    with pytest.raises(RunStateError, match="succeeded"):
        send(done.id, "approval", {"late": True})
    waiting = parked(driver, message_jobs.approval.enqueue(12))
    with pytest.raises(InvalidName):
        send(waiting.id, "")
    with pytest.raises(InvalidPayload):
        send(waiting.id, "approval", {"nan": float("nan")})
    assert not Message.objects.exists()


def test_asend_sends_from_async_code(driver: Driver) -> None:
    from asgiref.sync import async_to_sync

    run = parked(driver, message_jobs.approval.enqueue(13))
    async_to_sync(asend)(run.id, "approval", "from an async view")
    driver.step(run)
    run.refresh_from_db()
    assert _decision(run) == "from an async view"


def test_an_async_job_receives_messages_in_order(driver: Driver) -> None:
    run = message_jobs.ainbox.enqueue(2)
    driver.step(run)
    send(run.id, "item", "a")
    send(run.id, "item", "b")
    driver.drain()
    run.refresh_from_db()
    assert run.result == ["a", "b"]


def test_replay_from_before_a_receive_gives_its_message_back(
    driver: Driver, clock: FakeClock
) -> None:
    run = message_jobs.approval.enqueue(14)
    send(run.id, "approval", "first")
    send(run.id, "approval", "second")
    driver.drain()
    replay_from(run.id, "decision", now=clock.now())
    driver.drain()
    run.refresh_from_db()
    assert _decision(run) == "first"  # the same message again, not the next
    assert Message.objects.get(payload="second").step == ""


def test_the_receive_record_says_what_it_waits_for(driver: Driver) -> None:
    run = parked(driver, message_jobs.approval.enqueue(15))
    step = StepRecord.objects.get(run=run, name="decision")
    assert (step.kind, step.status, step.event) == ("receive", StepStatus.WAITING, "approval")
