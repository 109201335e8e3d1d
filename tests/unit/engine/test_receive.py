"""``step.receive`` against the in-memory stores and a fake clock, sync and async alike:
the oldest message of its topic not yet received, kept from before the step started,
each once, in the order sent; the run parks until one is sent."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from django_durable_jobs.engine.async_steps import AsyncSteps, inline
from django_durable_jobs.engine.memory import MemoryMailbox
from django_durable_jobs.engine.sync_steps import Steps as SyncSteps
from django_durable_jobs.engine.timeouts import TimeGuard
from django_durable_jobs.engine.vocabulary import StepKind, StepStatus
from django_durable_jobs.exceptions import (
    InvalidName,
    JobTimeoutError,
    StepDuplicateError,
    Suspension,
)
from tests.unit.engine.test_steps import Awaited, Harness


class Mailed(Harness):
    """``Harness`` with a mailbox."""

    def __init__(self, mode: str = "sync") -> None:
        super().__init__(mode)
        self.mailbox = MemoryMailbox()

    def attempt(self, run_id: str = "run-1") -> Any:
        engine: dict[str, Any] = {
            "run_id": run_id,
            "job_name": "demo",
            "store": self.store,
            "events": self.events,
            "clock": self.clock,
            "limits": self.limits,
            "mailbox": self.mailbox,
        }
        if self.mode == "async":
            return Awaited(AsyncSteps(io=inline, **engine))
        return SyncSteps(guard=TimeGuard(use_signals=False), **engine)


@pytest.fixture(params=["sync", "async"])
def h(request: pytest.FixtureRequest) -> Mailed:
    return Mailed(request.param)


def test_a_message_sent_before_the_receive_started_is_kept_for_it(h: Mailed) -> None:
    h.mailbox.send("run-1", "approval", {"ok": True})
    assert h.attempt().receive("decision", "approval") == {"ok": True}
    done = h.record("decision")
    assert (done.status, done.kind, done.event) == (StepStatus.COMPLETED, "receive", "approval")


def test_messages_are_received_once_each_in_the_order_sent(h: Mailed) -> None:
    for n in (1, 2, 3):
        h.mailbox.send("run-1", "item", n)
    h.mailbox.send("run-2", "item", "another run's")
    h.mailbox.send("run-1", "other", "another topic's")
    steps = h.attempt()
    assert [steps.receive(f"take{i}", "item") for i in range(3)] == [1, 2, 3]
    assert [m[4] for m in h.mailbox.messages] == ["take0", "take1", "take2", None, None]


def test_a_replayed_receive_returns_its_message_and_takes_no_other(h: Mailed) -> None:
    h.mailbox.send("run-1", "item", "first")
    h.mailbox.send("run-1", "item", "second")
    assert h.attempt().receive("take", "item") == "first"
    replay = h.attempt()
    assert replay.receive("take", "item") == "first"
    assert replay.replayed_names == ("take",)
    assert h.mailbox.messages[1][4] is None  # still there for the next receive


def test_a_receive_parks_the_run_until_a_message_is_sent(h: Mailed) -> None:
    with pytest.raises(Suspension) as parked:
        h.attempt().receive("decision", "approval", timeout="2d")
    assert parked.value.kind is StepKind.RECEIVE
    assert parked.value.wake_at == h.clock.now() + timedelta(seconds=30)  # poll < deadline
    waiting = h.record("decision")
    assert waiting.status is StepStatus.WAITING and waiting.event == "approval"
    assert waiting.deadline == waiting.started_at + timedelta(days=2)
    h.clock.advance("1h")
    h.mailbox.send("run-1", "approval", "yes")
    assert h.attempt().receive("decision", "approval", timeout="2d") == "yes"
    assert h.record("decision").started_at == waiting.started_at


def test_a_receive_returns_none_at_its_deadline(h: Mailed) -> None:
    with pytest.raises(Suspension):
        h.attempt().receive("decision", "approval", timeout="1h")
    h.clock.advance("1h")
    assert h.attempt().receive("decision", "approval", timeout="1h") is None
    assert h.record("decision").status is StepStatus.COMPLETED
    h.mailbox.send("run-1", "approval", "late")  # kept for a later receive, not this one
    assert h.attempt().receive("decision", "approval") is None


def test_a_required_receive_fails_the_run_at_its_deadline(h: Mailed) -> None:
    with pytest.raises(Suspension):
        h.attempt().receive("must", "go", timeout="1h", required=True)
    h.clock.advance("2h")
    with pytest.raises(JobTimeoutError, match="got no 'go' message within 1h"):
        h.attempt().receive("must", "go", timeout="1h", required=True)
    assert h.record("must").status is StepStatus.FAILED


@pytest.mark.parametrize("topic", ["", "x" * 201, "nul\x00", 7])
def test_a_topic_that_cannot_be_stored_is_refused_before_anything_is_read(
    h: Mailed, topic: Any
) -> None:
    with pytest.raises(InvalidName):
        h.attempt().receive("r", topic)
    assert h.store.get("run-1", "r") is None


def test_a_receive_name_is_a_step_name_like_any_other(h: Mailed) -> None:
    h.mailbox.send("run-1", "item", 1)
    h.mailbox.send("run-1", "item", 2)
    steps = h.attempt()
    steps.receive("take", "item")
    with pytest.raises(StepDuplicateError):
        steps.receive("take", "item")
