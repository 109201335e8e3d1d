"""``ctx.patched`` / ``ctx.deprecate_patch`` and the steps a run's last attempt never
reached, on the in-memory store: each rule for sync and async jobs alike."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from django_durable_jobs.engine.async_steps import AsyncSteps, inline
from django_durable_jobs.engine.clock import FakeClock
from django_durable_jobs.engine.memory import MemoryEventLog, MemoryStepStore
from django_durable_jobs.engine.sync_steps import Steps
from django_durable_jobs.engine.vocabulary import StepKind, StepStatus
from django_durable_jobs.exceptions import InvalidName, StepUsageError

KINDS = ["sync", "async"]


class Attempt:
    """One attempt of run "r" over ``store``, started as the worker starts it (an async
    job's records are read before it starts)."""

    def __init__(self, store: MemoryStepStore, kind: str) -> None:
        self.store, self.kind = store, kind
        common: dict[str, Any] = {
            "run_id": "r",
            "job_name": "demo",
            "store": store,
            "events": MemoryEventLog(),
            "clock": FakeClock(),
        }
        self.steps: Steps | AsyncSteps
        if kind == "sync":
            self.steps = Steps(**common)
        else:
            self.steps = AsyncSteps(io=inline, records=store.list("r"), **common)
        self.executed: list[str] = []

    def run(self, name: str) -> Any:
        def effect() -> str:
            self.executed.append(name)
            return name

        if isinstance(self.steps, Steps):
            return self.steps.run(name, effect)

        async def async_effect() -> str:
            return effect()

        return asyncio.run(self.steps.run(name, async_effect))

    def patched(self, change_id: str) -> bool:
        return self.steps.patched(change_id)

    def deprecate(self, change_id: str) -> None:
        self.steps.deprecate_patch(change_id)

    def end(self) -> list[str]:
        """The attempt returns: answers written, and the steps it did not reach."""
        if isinstance(self.steps, AsyncSteps):
            asyncio.run(self.steps.save_answers())
        return list(self.steps.unreached_steps() or [])


def new_code(attempt: Attempt) -> list[str]:
    """The flow after the deploy: a patch between "a" and "b" adds "sms"."""
    attempt.run("a")
    if attempt.patched("send-sms"):
        attempt.run("sms")
    attempt.run("b")
    return attempt.end()


def names(store: MemoryStepStore) -> list[str]:
    return [record.name for record in store.list("r")]


@pytest.mark.parametrize("kind", KINDS)
def test_a_new_run_takes_the_new_branch_and_records_the_answer(kind: str) -> None:
    store = MemoryStepStore()
    attempt = Attempt(store, kind)
    assert new_code(attempt) == []
    assert attempt.executed == ["a", "sms", "b"]
    answer = store.get("r", "patch:send-sms")
    assert answer is not None
    assert (answer.kind, answer.status, answer.output) == (
        StepKind.PATCH,
        StepStatus.COMPLETED,
        True,
    )
    assert names(store) == ["a", "patch:send-sms", "sms", "b"]


@pytest.mark.parametrize("kind", KINDS)
def test_a_run_whose_history_goes_past_the_patch_keeps_the_old_branch(kind: str) -> None:
    store = MemoryStepStore()
    old = Attempt(store, kind)
    old.run("a")
    old.run("b")  # the old code: no patch; the run then parked (a sleep, a wait)
    attempt = Attempt(store, kind)
    assert new_code(attempt) == []
    assert attempt.executed == []  # "a" and "b" replayed, "sms" never sent
    answer = store.get("r", "patch:send-sms")
    assert answer is not None and answer.output is False


@pytest.mark.parametrize("kind", KINDS)
def test_a_run_that_had_not_got_this_far_takes_the_new_branch(kind: str) -> None:
    store = MemoryStepStore()
    Attempt(store, kind).run("a")  # parked after "a" when the code changed
    attempt = Attempt(store, kind)
    new_code(attempt)
    assert attempt.executed == ["sms", "b"]


@pytest.mark.parametrize("kind", KINDS)
def test_the_answer_is_the_same_on_every_replay(kind: str) -> None:
    store = MemoryStepStore()
    first = Attempt(store, kind)
    first.run("a")
    assert first.patched("send-sms")
    first.run("sms")
    first.run("b")  # history now goes past the patch: asked afresh, it would say False
    again = Attempt(store, kind)
    assert new_code(again) == []
    assert again.executed == []
    assert again.steps.replayed_names == ("a", "patch:send-sms", "sms", "b")


@pytest.mark.parametrize("kind", KINDS)
def test_asking_twice_in_one_attempt_gives_the_same_answer(kind: str) -> None:
    attempt = Attempt(MemoryStepStore(), kind)
    assert attempt.patched("x") and attempt.patched("x")
    attempt.run("a")
    assert attempt.patched("x")


def test_an_async_answer_is_written_before_the_next_record() -> None:
    store = MemoryStepStore()
    attempt = Attempt(store, "async")
    assert attempt.patched("x")
    assert names(store) == []  # not awaited: nothing written yet
    attempt.run("a")
    assert names(store) == ["patch:x", "a"]  # a retry that finds "a" finds the answer


def test_an_async_job_whose_records_were_not_read_cannot_ask() -> None:
    steps = AsyncSteps(
        run_id="r", job_name="demo", store=MemoryStepStore(), events=MemoryEventLog(), io=inline
    )
    with pytest.raises(StepUsageError, match=r"ctx\.patched\('x'\) needs the run's records"):
        steps.patched("x")


@pytest.mark.parametrize("kind", KINDS)
def test_deprecate_patch_accepts_either_answer_and_records_nothing_new(kind: str) -> None:
    for old_answer in (True, False):
        store = MemoryStepStore()
        first = Attempt(store, kind)
        if not old_answer:
            first.run("a")
            first.run("b")
        else:
            first.run("a")
            first.patched("send-sms")
        # The deploy after: the old branch is gone, the patch deprecated.
        attempt = Attempt(store, kind)
        attempt.run("a")
        attempt.deprecate("send-sms")
        attempt.run("b")
        assert attempt.end() == []  # the recorded answer counts as reached
    fresh_store = MemoryStepStore()
    fresh = Attempt(fresh_store, kind)
    fresh.deprecate("send-sms")
    fresh.run("a")
    fresh.end()
    assert names(fresh_store) == ["a"]


@pytest.mark.parametrize("kind", KINDS)
def test_a_patch_whose_call_is_gone_is_reported_unless_deprecated(kind: str) -> None:
    store = MemoryStepStore()
    first = Attempt(store, kind)
    first.run("a")
    first.patched("send-sms")
    first.end()
    removed = Attempt(store, kind)  # deployed without the patch, not even deprecated
    removed.run("a")
    assert removed.end() == ["patch:send-sms"]


@pytest.mark.parametrize("kind", KINDS)
def test_the_steps_the_last_attempt_never_reached_are_reported(kind: str) -> None:
    store = MemoryStepStore()
    old = Attempt(store, kind)
    for name in ("a", "b", "c"):
        old.run(name)
    attempt = Attempt(store, kind)  # the deploy removed "b" and renamed "c"
    attempt.run("a")
    attempt.run("c2")
    assert attempt.end() == ["b", "c"]


@pytest.mark.parametrize("kind", KINDS)
def test_a_step_of_the_job_cannot_take_a_patch_answer_name(kind: str) -> None:
    attempt = Attempt(MemoryStepStore(), kind)
    attempt.run("patch:x")
    with pytest.raises(StepUsageError, match="which a step of the job's already uses"):
        attempt.patched("x")


@pytest.mark.parametrize("change_id", ["", 7, "x" * 195, "a\x00b"])
def test_a_change_id_is_a_short_storable_string(change_id: Any) -> None:
    attempt = Attempt(MemoryStepStore(), "sync")
    with pytest.raises(InvalidName):
        attempt.patched(change_id)
