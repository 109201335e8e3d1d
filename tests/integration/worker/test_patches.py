"""``ctx.patched`` across a deploy, on the database: runs parked under the old code keep
its branch, runs that had not got this far and new runs take the new one; the answer is
recorded once. And the steps the code that finished a run never reached are recorded on
the run. Sync and async jobs, executed as the worker executes them (``InlineJobs``)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from django_durable_jobs import job
from django_durable_jobs.definitions.registry import unregister
from django_durable_jobs.models import RunStatus
from django_durable_jobs.testing import InlineJobs
from django_durable_jobs.verbs import runs
from tests.testapp.jobs import effect
from tests.testapp.models import Effect

pytestmark = pytest.mark.django_db

NAME = "tests.patches.flow"


def old_sync(ctx: Any) -> str:
    ctx.step.run("a", effect, "a", ctx.run_id)
    ctx.step.sleep("1h")
    ctx.step.run("b", effect, "b", ctx.run_id)
    return "done"


def new_sync(ctx: Any) -> str:
    ctx.step.run("a", effect, "a", ctx.run_id)
    if ctx.patched("send-sms"):
        ctx.step.run("sms", effect, "sms", ctx.run_id)
    ctx.step.sleep("1h")
    ctx.step.run("b", effect, "b", ctx.run_id)
    return "done"


async def old_async(ctx: Any) -> str:
    await ctx.step.run("a", effect, "a", ctx.run_id)
    await ctx.step.sleep("1h")
    await ctx.step.run("b", effect, "b", ctx.run_id)
    return "done"


async def new_async(ctx: Any) -> str:
    await ctx.step.run("a", effect, "a", ctx.run_id)
    if ctx.patched("send-sms"):  # not awaited
        await ctx.step.run("sms", effect, "sms", ctx.run_id)
    await ctx.step.sleep("1h")
    await ctx.step.run("b", effect, "b", ctx.run_id)
    return "done"


FLOWS = {"sync": (old_sync, new_sync), "async": (old_async, new_async)}


@pytest.fixture
def deploy() -> Iterator[Callable[[Callable[..., Any]], Any]]:
    """Register ``fn`` as the job's code, as a deploy replaces a module."""

    def deployed(fn: Callable[..., Any]) -> Any:
        unregister(NAME)
        return job(name=NAME)(fn)

    yield deployed
    unregister(NAME)


def effects(run: Any) -> list[str]:
    return sorted(Effect.objects.filter(run_id=str(run.id)).values_list("name", flat=True))


@pytest.mark.parametrize("kind", FLOWS)
def test_runs_in_flight_keep_their_branch_and_new_runs_take_the_patch(
    durable_jobs: InlineJobs, deploy: Any, kind: str
) -> None:
    old, new = FLOWS[kind]
    deploy(old)
    parked = durable_jobs.enqueue(NAME)
    durable_jobs.drain()
    assert durable_jobs.refresh(parked).status == RunStatus.SLEEPING  # after "a"
    waiting = durable_jobs.enqueue(NAME)
    # "waiting" has not started when the new code ships.
    flow = deploy(new)
    fresh = flow.enqueue()
    durable_jobs.advance("1h")
    for run in (parked, waiting, fresh):
        assert durable_jobs.result(run) == "done"
    assert effects(parked) == ["a", "b"]  # its history went past the patch: no sms
    assert effects(waiting) == effects(fresh) == ["a", "b", "sms"]
    answers = {run.pk: durable_jobs.step(run, "patch:send-sms").output for run in (parked, fresh)}
    assert answers == {parked.pk: False, fresh.pk: True}
    assert durable_jobs.step(fresh, "patch:send-sms").kind == "patch"
    # Replayed from "b", each run gives the answer it recorded: "sms" runs no more.
    for run in (parked, fresh):
        runs.replay_from(run.id, "b", now=durable_jobs.now)
        durable_jobs.finish(run)
    assert effects(parked) == ["a", "b", "b"] and effects(fresh) == ["a", "b", "b", "sms"]


@pytest.mark.parametrize("kind", FLOWS)
def test_steps_the_finishing_code_never_reached_are_recorded_on_the_run(
    durable_jobs: InlineJobs, deploy: Any, kind: str
) -> None:
    old, _ = FLOWS[kind]
    deploy(old)
    run = durable_jobs.enqueue(NAME)
    durable_jobs.drain()

    if kind == "sync":

        def renamed(ctx: Any) -> str:
            ctx.step.sleep("1h")
            ctx.step.run("b2", effect, "b2", ctx.run_id)
            return "done"
    else:

        async def renamed(ctx: Any) -> str:  # type: ignore[misc]
            await ctx.step.sleep("1h")
            await ctx.step.run("b2", effect, "b2", ctx.run_id)
            return "done"

    deploy(renamed)  # "a" removed, "b" renamed "b2"
    assert durable_jobs.finish(run).result == "done"
    assert run.unreached_steps == ["a"]
    fresh = durable_jobs.run(NAME)
    assert fresh.unreached_steps == []
