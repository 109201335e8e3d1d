"""The step engine against the in-memory store and a fake clock."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from asgiref.sync import iscoroutinefunction

from django_durable_jobs.engine.async_steps import AsyncSteps, inline
from django_durable_jobs.engine.clock import FakeClock
from django_durable_jobs.engine.memory import MemoryChildRuns
from django_durable_jobs.engine.sync_steps import (
    MemoryEventLog,
    MemoryStepStore,
    StepLimits,
    Steps,
    StepStatus,
)
from django_durable_jobs.engine.timeouts import TimeGuard
from django_durable_jobs.engine.vocabulary import StepKind
from django_durable_jobs.exceptions import (
    JobTimeoutError,
    StepDuplicateError,
    StepOutputInvalid,
    StepUsageError,
    Suspension,
)


class Awaited:
    """``AsyncSteps`` with each call awaited to its end, so that every contract test
    below reads the same for async jobs; a step function becomes an ``async def``."""

    def __init__(self, steps: AsyncSteps) -> None:
        self._steps = steps

    def __getattr__(self, name: str) -> Any:
        method = getattr(self._steps, name)
        if not iscoroutinefunction(method):
            return method

        def awaited(*args: Any, **kwargs: Any) -> Any:
            if name == "run" and callable(args[1]):
                args = (args[0], _as_async(args[1]), *args[2:])
            return asyncio.run(method(*args, **kwargs))

        return awaited


def _as_async(fn: Callable[..., Any]) -> Callable[..., Any]:
    async def step(*args: Any, **kwargs: Any) -> Any:
        return fn(*args, **kwargs)

    return step


class Harness:
    """One run's engine, rebuilt per attempt the way the worker does; ``mode`` says
    whether the job is sync (``Steps``) or async (``AsyncSteps``, awaited)."""

    def __init__(self, mode: str = "sync") -> None:
        self.mode = mode
        self.clock = FakeClock()
        self.store = MemoryStepStore()
        self.events = MemoryEventLog(self.clock)
        self.limits = StepLimits(event_poll=timedelta(seconds=30))
        self.children = MemoryChildRuns()

    def attempt(self, run_id: str = "run-1") -> Any:
        engine: dict[str, Any] = {
            "run_id": run_id,
            "job_name": "demo",
            "store": self.store,
            "events": self.events,
            "clock": self.clock,
            "limits": self.limits,
            "children": self.children,
        }
        if self.mode == "async":
            return Awaited(AsyncSteps(io=inline, **engine))
        return Steps(guard=TimeGuard(use_signals=False), **engine)

    def record(self, name: str, run_id: str = "run-1") -> Any:
        record = self.store.get(run_id, name)
        assert record is not None, f"no record for {name}"
        return record


@pytest.fixture(params=["sync", "async"])
def h(request: pytest.FixtureRequest) -> Harness:
    """The engine's contract holds for sync and async jobs alike."""
    return Harness(request.param)


@pytest.fixture
def sync_h() -> Harness:
    return Harness("sync")


class Counter:
    def __init__(self, value: Any = "out") -> None:
        self.calls = 0
        self.value = value

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        self.calls += 1
        return self.value


# -- run ------------------------------------------------------------------------


def test_run_memoizes_and_replay_does_not_call_again(h: Harness) -> None:
    fn = Counter({"id": 1})
    steps = h.attempt()
    assert steps.run("load", fn) == {"id": 1}
    replay = h.attempt()
    assert replay.run("load", fn) == {"id": 1}
    assert fn.calls == 1  # not re-executed on replay
    assert replay.replayed_names == ("load",)
    assert steps.replayed_names == ()


def test_run_persists_before_returning(h: Harness) -> None:
    seen: list[Any] = []

    def after() -> None:
        seen.append(h.store.get("run-1", "first"))

    steps = h.attempt()
    steps.run("first", lambda: 1)
    steps.run("second", after)
    assert seen[0] is not None and seen[0].status is StepStatus.COMPLETED
    assert seen[0].output == 1


def test_run_passes_arguments_and_returns_decoded_value_first_time(h: Harness) -> None:
    steps = h.attempt()
    assert steps.run("pair", lambda a, b=0: (a, b), 1, b=2) == [1, 2]  # a tuple comes back a list
    assert h.attempt().run("pair", lambda: None) == [1, 2]
    record = h.record("pair")
    assert record.attempts == 1 and record.completed_at == h.clock.now()


def test_failed_step_records_error_and_reraises_then_reruns(h: Harness) -> None:
    calls = {"n": 0}

    def flaky() -> str:
        calls["n"] += 1
        if calls["n"] == 1:
            raise ConnectionError("smtp down")
        return "sent"

    first = h.attempt()
    first.run("load", lambda: "user")
    with pytest.raises(ConnectionError, match="smtp down"):
        first.run("send", flaky)
    failed = h.record("send")
    assert failed.status is StepStatus.FAILED
    assert failed.attempts == 1
    assert failed.error.type == "builtins.ConnectionError"
    assert failed.error.message == "smtp down"
    assert "flaky" in failed.error.traceback

    loads = Counter("user")
    second = h.attempt()
    assert second.run("load", loads) == "user"
    assert second.run("send", flaky) == "sent"
    assert loads.calls == 0
    done = h.record("send")
    assert done.status is StepStatus.COMPLETED and done.attempts == 2
    assert done.started_at == failed.started_at  # the step's span starts at its first try


def test_unstorable_output_fails_with_step_output_invalid(h: Harness) -> None:
    for name, value in [
        ("nan", float("nan")),
        ("inf", float("inf")),
        ("nul", "a\x00b"),
        ("obj", object()),
        ("set", {1}),
    ]:
        with pytest.raises(StepOutputInvalid) as info:
            h.attempt().run(name, lambda v=value: v)
        assert info.value.code == "X_STEP_OUTPUT_INVALID"
        assert name in str(info.value)
        assert h.record(name).status is StepStatus.FAILED


def test_output_over_size_limit_fails(h: Harness) -> None:
    h.limits = StepLimits(max_output_bytes=10)
    with pytest.raises(StepOutputInvalid, match="over the limit"):
        h.attempt().run("big", lambda: "x" * 20)
    assert h.attempt().run("small", lambda: "x") == "x"


def test_duplicate_step_name_in_one_attempt(h: Harness) -> None:
    steps = h.attempt()
    steps.run("a", lambda: 1)
    with pytest.raises(StepDuplicateError) as info:
        steps.run("a", lambda: 2)
    assert info.value.code == "X_STEP_DUPLICATE"
    assert "'a'" in str(info.value) and "demo" in str(info.value)
    with pytest.raises(StepDuplicateError):
        steps.sleep("a", "1s")


@pytest.mark.parametrize("name", ["", "x" * 201, None, 5])
def test_bad_step_names(h: Harness, name: Any) -> None:
    with pytest.raises(ValueError, match="step names"):
        h.attempt().run(name, lambda: 1)


def test_used_names_in_order(h: Harness) -> None:
    steps = h.attempt()
    steps.run("a", lambda: 1)
    steps.run("b", lambda: 2)
    with pytest.raises(Suspension):
        steps.sleep("5m")
    assert steps.used_names == ("a", "b", "sleep:5m")
    assert [r.name for r in h.store.list("run-1")] == ["a", "b", "sleep:5m"]


def test_step_timeout_after_the_fact_with_fake_clock(h: Harness) -> None:
    h.limits = StepLimits(step_timeout=timedelta(seconds=5))

    def slow() -> str:
        h.clock.advance("6s")
        return "late"

    with pytest.raises(JobTimeoutError) as info:
        h.attempt().run("slow", slow)
    assert info.value.code == "X_JOB_TIMEOUT" and "step_timeout" in str(info.value)
    assert h.record("slow").status is StepStatus.FAILED
    assert h.attempt().run("quick", lambda: "ok") == "ok"


def test_step_timeout_stops_an_endless_loop() -> None:
    store = MemoryStepStore()
    steps = Steps(
        run_id="r",
        job_name="demo",
        store=store,
        events=MemoryEventLog(),
        limits=StepLimits(step_timeout=timedelta(milliseconds=200)),
    )

    def forever() -> None:
        while True:
            pass

    with pytest.raises(JobTimeoutError):
        steps.run("loop", forever)
    record = store.get("r", "loop")
    assert record is not None and record.status is StepStatus.FAILED


# -- sleep ----------------------------------------------------------------------


def test_sleep_suspends_then_completes_after_wake_time(h: Harness) -> None:
    start = h.clock.now()
    with pytest.raises(Suspension) as info:
        h.attempt().sleep("3d")
    assert info.value.wake_at == start + timedelta(days=3)
    assert info.value.kind is StepKind.SLEEP and info.value.step == "sleep:3d"
    record = h.record("sleep:3d")
    assert record.status is StepStatus.SLEEPING and record.wake_at == start + timedelta(days=3)

    h.clock.advance("1d")  # resumed early: suspend again with the SAME wake time
    with pytest.raises(Suspension) as again:
        h.attempt().sleep("3d")
    assert again.value.wake_at == start + timedelta(days=3)

    h.clock.advance("2d")
    h.attempt().sleep("3d")  # returns
    done = h.record("sleep:3d")
    assert done.status is StepStatus.COMPLETED and done.completed_at == h.clock.now()
    replay = h.attempt()
    replay.sleep("3d")
    assert replay.replayed_names == ("sleep:3d",)


def test_sleep_names_and_duration_forms(h: Harness) -> None:
    steps = h.attempt()
    with pytest.raises(Suspension) as named:
        steps.sleep("cool-off", timedelta(minutes=5))
    assert named.value.step == "cool-off"
    steps2 = h.attempt("run-2")
    with pytest.raises(Suspension) as by_td:
        steps2.sleep(timedelta(hours=1, minutes=30))
    assert by_td.value.step == "sleep:1h30m"
    steps3 = h.attempt("run-3")
    with pytest.raises(Suspension) as by_seconds:
        steps3.sleep(90)
    assert by_seconds.value.step == "sleep:90"
    assert by_seconds.value.wake_at == h.clock.now() + timedelta(seconds=90)


def test_sleep_invalid_duration(h: Harness) -> None:
    from django_durable_jobs.exceptions import InvalidDuration

    with pytest.raises(InvalidDuration, match="5 mins"):
        h.attempt().sleep("5 mins")
    assert h.store.list("run-1") == []


def test_sleep_until(h: Harness) -> None:
    from datetime import datetime

    when = h.clock.now() + timedelta(hours=2)
    with pytest.raises(Suspension) as info:
        h.attempt().sleep_until("until", when)
    assert info.value.wake_at == when
    h.clock.set(when)
    h.attempt().sleep_until("until", when)
    assert h.record("until").status is StepStatus.COMPLETED
    # Wrong use, which no retry fixes: the run fails at once.
    with pytest.raises(StepUsageError, match="aware") as naive:
        h.attempt().sleep_until("naive", datetime(2030, 1, 1))
    with pytest.raises(StepUsageError, match="takes a datetime"):
        h.attempt().sleep_until("text", "2030-01-01T00:00:00Z")
    assert naive.value.code == "X_STEP_USAGE" and not naive.value.retryable


def test_sleep_zero_completes_without_suspending(h: Harness) -> None:
    h.attempt().sleep("0s")
    assert h.record("sleep:0s").status is StepStatus.COMPLETED


def test_suspension_escapes_except_exception(h: Harness) -> None:
    steps = h.attempt()
    swallowed = []

    def job_body() -> None:
        try:
            steps.sleep("1h")
        except Exception:
            swallowed.append(True)

    with pytest.raises(Suspension):
        job_body()
    assert swallowed == []


def test_suspension_inside_run_is_not_a_failure(sync_h: Harness) -> None:
    h = sync_h
    steps = h.attempt()

    def nested() -> None:
        steps.sleep("inner", "1h")

    with pytest.raises(Suspension):
        steps.run("outer", nested)
    assert h.store.get("run-1", "outer") is None  # not recorded as failed


# -- wait_for_event --------------------------------------------------------------


def test_wait_returns_event_published_after_the_wait_started(h: Harness) -> None:
    h.events.publish("order.paid", {"order": 0}, key="42")  # before: never counts
    with pytest.raises(Suspension) as info:
        h.attempt().wait_for_event("wait", "order.paid", match="42", timeout="7d")
    assert info.value.kind is StepKind.WAIT
    assert info.value.wake_at == h.clock.now() + timedelta(seconds=30)  # poll < deadline
    waiting = h.record("wait")
    assert waiting.status is StepStatus.WAITING
    assert waiting.kind == "wait" and waiting.deadline == waiting.started_at + timedelta(days=7)
    assert waiting.event == "order.paid" and waiting.correlation_key == "42"

    h.clock.advance("1h")
    h.events.publish("order.paid", {"order": 1}, key="other")  # wrong key: ignored
    h.events.publish("order.shipped", {"order": 2}, key="42")  # wrong event: ignored
    h.events.publish("order.paid", {"order": 3}, key="42")  # the first after the wait wins
    h.events.publish("order.paid", {"order": 4}, key="42")
    assert h.attempt().wait_for_event("wait", "order.paid", match="42") == {"order": 3}
    done = h.record("wait")
    assert done.status is StepStatus.COMPLETED and done.output == {"order": 3}
    assert done.started_at == waiting.started_at

    replay = h.attempt()
    assert replay.wait_for_event("wait", "order.paid", match="42") == {"order": 3}
    assert replay.replayed_names == ("wait",)


def test_wait_without_match_takes_any_key(h: Harness) -> None:
    with pytest.raises(Suspension):
        h.attempt().wait_for_event("w", "signup")
    h.events.publish("signup", {"u": 1}, key="anything")
    assert h.attempt().wait_for_event("w", "signup") == {"u": 1}


def test_wait_parks_until_min_of_deadline_and_poll(h: Harness) -> None:
    start = h.clock.now()
    with pytest.raises(Suspension) as first:
        h.attempt().wait_for_event("w", "e", timeout="10s")
    assert first.value.wake_at == start + timedelta(seconds=10)
    assert h.record("w").attempts == 1
    h.clock.advance("4s")
    with pytest.raises(Suspension) as second:
        h.attempt().wait_for_event("w", "e", timeout="10s")
    assert second.value.wake_at == start + timedelta(seconds=10)  # deadline from first start
    assert h.record("w").attempts == 1  # looking again is not another execution


def test_wait_counts_executions_not_looks(h: Harness) -> None:
    for _ in range(50):  # a long wait, polled: still its first execution
        with pytest.raises(Suspension):
            h.attempt().wait_for_event("w", "e", timeout="1h", required=True)
        h.clock.advance("1m")
    assert h.record("w").attempts == 1
    h.clock.advance("1h")
    with pytest.raises(JobTimeoutError):
        h.attempt().wait_for_event("w", "e", timeout="1h", required=True)
    assert h.record("w").attempts == 1
    with pytest.raises(JobTimeoutError):  # the run retried: the failed wait runs again
        h.attempt().wait_for_event("w", "e", timeout="1h", required=True)
    assert h.record("w").attempts == 2


def test_wait_timeout_returns_none_and_logs_warning(
    h: Harness, caplog: pytest.LogCaptureFixture
) -> None:
    with pytest.raises(Suspension):
        h.attempt().wait_for_event("w", "order.paid", timeout="1h")
    h.clock.advance("1h")
    with caplog.at_level(logging.WARNING, logger="django_durable_jobs.steps"):
        assert h.attempt().wait_for_event("w", "order.paid", timeout="1h") is None
    assert "order.paid" in caplog.text
    record = h.record("w")
    assert record.status is StepStatus.COMPLETED and record.output is None
    h.events.publish("order.paid", {"late": True})
    assert h.attempt().wait_for_event("w", "order.paid", timeout="1h") is None  # replayed


def test_wait_default_timeout_is_24h(h: Harness) -> None:
    start = h.clock.now()
    h.limits = StepLimits(event_poll=timedelta(days=30))
    with pytest.raises(Suspension) as info:
        h.attempt().wait_for_event("w", "e")
    assert info.value.wake_at == start + timedelta(hours=24)


def test_required_wait_times_out_with_job_timeout(h: Harness) -> None:
    with pytest.raises(Suspension):
        h.attempt().wait_for_event("w", "e", timeout="1h", required=True)
    h.clock.advance("2h")
    with pytest.raises(JobTimeoutError) as info:
        h.attempt().wait_for_event("w", "e", timeout="1h", required=True)
    assert info.value.code == "X_JOB_TIMEOUT" and "'w'" in str(info.value)
    assert h.record("w").status is StepStatus.FAILED


def test_wait_match_must_be_a_string(h: Harness) -> None:
    with pytest.raises(
        StepUsageError, match=r"match must be a str, got 42 \(write match=str\(42\)\)"
    ):
        h.attempt().wait_for_event("w", "e", match=42)


def test_a_step_function_that_is_not_callable_is_a_usage_error(h: Harness) -> None:
    with pytest.raises(StepUsageError, match="takes a function to call, got 42") as info:
        h.attempt().run("n", 42)
    assert not info.value.retryable and list(h.store.list("run-1")) == []


# -- publish and invoke ------------------------------------------------------------


def test_publish_is_a_step_published_once(h: Harness) -> None:
    position = h.attempt().publish("announce", "user.signed_up", {"u": 1}, key="1")
    assert h.events.cursor() == position == 1
    assert h.attempt().publish("announce", "user.signed_up", {"u": 1}, key="1") == position
    assert h.events.cursor() == 1  # the replay published nothing
    record = h.record("announce")
    assert record.event == "user.signed_up" and record.correlation_key == "1"


def test_invoke_starts_one_child_and_returns_its_result(h: Harness) -> None:
    from django_durable_jobs.engine.records import ChildOutcome

    children = h.children
    attempt = h.attempt

    with pytest.raises(Suspension) as info:
        attempt().invoke("child", "jobs.child", 3, key="x", timeout="1h")
    assert info.value.kind is StepKind.INVOKE
    [child] = children.started
    parked = h.record("child")
    assert parked.kind == "invoke" and parked.child == child
    assert parked.deadline == parked.started_at + timedelta(hours=1)
    assert children.started[child] == ("jobs.child", (3,), {"key": "x"})
    with pytest.raises(Suspension):
        attempt().invoke("child", "jobs.child", 3, key="x", timeout="1h")
    assert len(children.started) == 1  # a replay never starts a second child
    children.finish(child, ChildOutcome(True, result=[30]))
    assert attempt().invoke("child", "jobs.child", 3, key="x") == [30]
    assert attempt().invoke("child", "jobs.child", 3, key="x") == [30]  # replayed


def test_invoke_failure_and_timeout(h: Harness) -> None:
    from django_durable_jobs.engine.records import ChildOutcome
    from django_durable_jobs.engine.serialization import ErrorInfo
    from django_durable_jobs.exceptions import ChildRunFailed

    children = h.children
    attempt = h.attempt

    with pytest.raises(Suspension):
        attempt().invoke("bad", "jobs.child")
    children.finish(
        "run-1/bad",
        ChildOutcome(False, error=ErrorInfo(type="ValueError", message="no", traceback="")),
    )
    with pytest.raises(ChildRunFailed, match="no") as failed:
        attempt().invoke("bad", "jobs.child")
    assert failed.value.code == "X_CHILD_FAILED"
    with pytest.raises(Suspension):
        attempt().invoke("slow", "jobs.child", timeout="10m")
    h.clock.advance("10m")
    with pytest.raises(JobTimeoutError, match="did not finish"):
        attempt().invoke("slow", "jobs.child", timeout="10m")
    assert h.record("slow").status is StepStatus.FAILED


def test_an_async_step_function_in_a_sync_job_is_a_usage_error() -> None:
    h = Harness("sync")

    async def fetch() -> int:
        return 1

    with pytest.raises(StepUsageError, match="returned an awaitable") as info:
        h.attempt().run("fetch", fetch)
    assert not info.value.retryable
    assert h.record("fetch").status is StepStatus.FAILED
