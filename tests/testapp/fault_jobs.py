"""Jobs the fault-injection matrix (tests/processes/test_faults.py) runs in real worker processes.

Each step's side effect is an ``Effect`` row written first thing in the step, so the
test counts exactly how often each side effect happened.
"""

from __future__ import annotations

import time
from typing import Any

from django_durable_jobs import job

from .models import Effect

#: Long enough for a few heartbeats per step (the tests beat every 0.5 s).
STEP_SECONDS = 0.6


def _effect(name: str, run_id: str) -> str:
    Effect.objects.create(name=name, run_id=run_id)
    time.sleep(STEP_SECONDS)  # a heartbeat fault lands inside a step
    return name


#: The event each ``trio`` round publishes from a step, keyed ``<run id>:<round>``.
TRIO_EVENT = "tests.faults.trio.done"


@job(name="tests.faults.trio", retries=3, backoff=0)
def trio(ctx: Any) -> list[str]:
    """Three steps, each followed by a published event and a short sleep: the run is
    claimed four times and parks three times, so every worker point is hit first, in the
    middle and last. The publish steps pass no fault point of their own (the event and
    the step record commit together): the faults around them must never publish one
    twice or lose it."""
    done = []
    for i in (1, 2, 3):
        done.append(ctx.step.run(f"s{i}", _effect, f"s{i}", ctx.run_id))
        ctx.step.publish(f"pub{i}", TRIO_EVENT, {"round": i}, key=f"{ctx.run_id}:{i}")
        ctx.step.sleep(f"nap{i}", "50ms")
    return done


@job(name="tests.faults.atomic_trio", retries=3, backoff=0)
def atomic_trio(ctx: Any) -> list[str]:
    """``trio``'s steps as atomic steps: each ``Effect`` row commits with its step's
    record, so every fault leaves each effect exactly once (no window repeats one)."""
    done = []
    for i in (1, 2, 3):
        done.append(ctx.step.atomic(f"s{i}", _effect, f"s{i}", ctx.run_id))
        ctx.step.sleep(f"nap{i}", "50ms")
    return done


@job(name="tests.faults.aatomic_trio", retries=3, backoff=0)
async def aatomic_trio(ctx: Any) -> list[str]:
    """``atomic_trio`` as an ``async def`` job: each step's function and transaction run
    on one of the lane's database threads."""
    done = []
    for i in (1, 2, 3):
        done.append(await ctx.step.atomic(f"s{i}", _effect, f"s{i}", ctx.run_id))
        await ctx.step.sleep(f"nap{i}", "50ms")
    return done


@job(name="tests.faults.atrio", retries=3, backoff=0)
async def atrio(ctx: Any) -> list[str]:
    """``trio`` as an ``async def`` job, executed by the worker's async lane: its claims,
    step records and outcomes take the lane's paths (hand-over, batched step writes,
    the recorder)."""
    done = []
    for i in (1, 2, 3):
        done.append(await ctx.step.run(f"s{i}", _effect, f"s{i}", ctx.run_id))
        await ctx.step.publish(f"pub{i}", TRIO_EVENT, {"round": i}, key=f"{ctx.run_id}:{i}")
        await ctx.step.sleep(f"nap{i}", "50ms")
    return done


#: The topic of the messages ``inbox`` receives; the test sends ``{"n": i}`` for round i.
INBOX_TOPIC = "tests.faults.item"


@job(name="tests.faults.inbox", retries=3, backoff=0)
def inbox(ctx: Any) -> list[Any]:
    """Three receives, each followed by a step and a short sleep: ``message.matched`` and
    ``message.received`` are hit first, in the middle and last. The first message is
    sent before the run starts, the others once it waits for them (``_MessagePump``):
    each must be received exactly once, by its own receive, whatever the fault."""
    got: list[Any] = []
    for i in (1, 2, 3):
        got.append(ctx.step.receive(f"recv{i}", INBOX_TOPIC, timeout="5m"))
        ctx.step.run(f"s{i}", _effect, f"s{i}", ctx.run_id)
        ctx.step.sleep(f"nap{i}", "50ms")
    return got


@job(name="tests.faults.ainbox", retries=3, backoff=0)
async def ainbox(ctx: Any) -> list[Any]:
    """``inbox`` as an ``async def`` job: each receive's transaction runs on one of the
    async lane's database threads."""
    got: list[Any] = []
    for i in (1, 2, 3):
        got.append(await ctx.step.receive(f"recv{i}", INBOX_TOPIC, timeout="5m"))
        await ctx.step.run(f"s{i}", _effect, f"s{i}", ctx.run_id)
        await ctx.step.sleep(f"nap{i}", "50ms")
    return got


@job(name="tests.faults.child", retries=3, backoff=0)
def child(ctx: Any, n: int) -> int:
    ctx.step.run("c", _effect, f"child{n}", ctx.run_id)
    return n


@job(name="tests.faults.relay", retries=3, backoff=0)
def relay(ctx: Any) -> list[Any]:
    """Per round: a child run (invoke), then an event the test publishes once the run
    waits for it (``ping`` keyed ``<run id>:<round>``)."""
    got: list[Any] = []
    for i in (1, 2, 3):
        got.append(ctx.step.invoke(f"invoke{i}", child, i, timeout="5m"))
        got.append(ctx.step.wait_for_event(f"wait{i}", "ping", match=f"{ctx.run_id}:{i}"))
    return got


@job(name="tests.faults.fan", retries=3, backoff=0)
def fan(ctx: Any) -> list[Any]:
    """Three fan-outs (``invoke_all``) of three children each: ``fanout.start`` is hit
    first, in the middle and last; child ``10 * round + k`` returns its number."""
    return [
        ctx.step.invoke_all(f"fan{i}", [child.call(10 * i + k) for k in (1, 2, 3)], timeout="5m")
        for i in (1, 2, 3)
    ]


@job(name="tests.faults.once", retries=0)
def once(ctx: Any) -> str:
    """No retries: an attempt counted for nothing would fail it."""
    return str(ctx.step.run("s1", _effect, "s1", ctx.run_id))


def _square(n: int) -> int:
    return n * n


@job(name="tests.faults.five", retries=20, backoff="200ms")
def five(ctx: Any, n: int) -> int:
    """Five steps; retries enough to ride out two database restarts."""
    return sum(int(ctx.step.run(f"s{i}", _square, n + i)) for i in range(5))


# -- the soak (tests/processes/test_soak.py, make soak) -----------------------------------------


def _note(name: str, run_id: str) -> str:
    Effect.objects.create(name=name, run_id=run_id)
    return name


def _flaky(run_id: str, attempt: int) -> int:
    Effect.objects.create(name="flaky", run_id=run_id)
    if attempt == 1:
        raise RuntimeError("the first attempt of a flaky step fails")
    return attempt


@job(name="tests.soak.leaf", retries=10, backoff=0)
def leaf(ctx: Any, n: int) -> int:
    ctx.step.run("leaf", _note, "leaf", ctx.run_id)
    return n


@job(name="tests.soak.mixed", retries=10, backoff="100ms")
def mixed(ctx: Any, n: int) -> int:
    """A sleep, a child run, a wait for an event the soak publishes, a step that fails
    its first attempt (one run in three): the mixed load of the soak."""
    ctx.step.run("a", _note, "a", ctx.run_id)
    ctx.step.sleep("nap", "200ms")
    got = int(ctx.step.invoke("child", leaf, n))
    ctx.step.wait_for_event("wait", "soak.ping", match=ctx.run_id, timeout="2m")
    if n % 3 == 0:
        ctx.step.run("flaky", _flaky, ctx.run_id, ctx.attempt)
    ctx.step.run("b", _note, "b", ctx.run_id)
    return got
