"""``@job(version=N)`` in the worker: enqueue starts the highest version, and a run
executes the version it started on for its whole life, whatever is registered later."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from django_durable_jobs import enqueue, job
from django_durable_jobs.definitions.registry import unregister
from django_durable_jobs.models import RunStatus
from django_durable_jobs.testing import InlineJobs
from django_durable_jobs.verbs import runs
from tests.testapp.jobs import CALLS, FAIL_ONCE, effect
from tests.testapp.models import Effect

pytestmark = pytest.mark.django_db

NAME = "tests.versions.flow"


@job(name=NAME, retries=2, backoff="1s")
def flow_v1(ctx: Any) -> str:
    ctx.step.run("a", effect, "v1:a", ctx.run_id)
    ctx.step.sleep("1h")
    ctx.step.run("b", effect, "v1:b", ctx.run_id)
    return "v1"


@pytest.fixture
def version_two() -> Iterator[Any]:
    """The deploy that adds version 2 of the flow, while runs of version 1 sleep."""

    @job(name=NAME, version=2)
    def flow_v2(ctx: Any) -> str:
        ctx.step.run("a2", effect, "v2:a2", ctx.run_id)
        return "v2"

    yield flow_v2
    unregister(NAME, 2)


def test_enqueue_starts_the_highest_version_from_any_handle(
    durable_jobs: InlineJobs, version_two: Any
) -> None:
    assert flow_v1.enqueue().job_version == 2  # the old handle starts the new code
    assert enqueue(NAME).job_version == 2
    assert version_two.using(queue="other").enqueue().job_version == 2


def test_a_run_keeps_its_version_across_a_deploy_retries_and_a_replay(
    durable_jobs: InlineJobs, request: pytest.FixtureRequest
) -> None:
    old = durable_jobs.enqueue(flow_v1)
    durable_jobs.drain()
    assert durable_jobs.refresh(old).status == RunStatus.SLEEPING
    assert old.job_version == 1

    request.getfixturevalue("version_two")  # deployed while the old run sleeps
    new = durable_jobs.enqueue(flow_v1)
    FAIL_ONCE.add("v1:b")  # the old run's next attempt fails once: retried on v1
    durable_jobs.advance("2h")

    assert durable_jobs.result(old) == "v1"
    assert durable_jobs.result(new) == "v2"
    assert (durable_jobs.refresh(old).job_version, old.attempt) == (1, 2)
    assert CALLS["v1:a"] == 1 and CALLS["v2:a2"] == 1  # nothing ran twice

    runs.replay_from(old.id, "b", now=durable_jobs.now)
    assert durable_jobs.finish(old).result == "v1"
    assert old.job_version == 1
    assert Effect.objects.filter(run_id=str(old.id), name="v1:a").count() == 1
    assert not Effect.objects.filter(run_id=str(old.id), name__startswith="v2").exists()


def test_a_run_of_a_version_nobody_registers_fails_naming_the_version(
    durable_jobs: InlineJobs, version_two: Any
) -> None:
    run = durable_jobs.enqueue(flow_v1)
    unregister(NAME, 2)  # the deploy is rolled back before the run started
    durable_jobs.drain()
    run = durable_jobs.refresh(run)
    assert run.status == RunStatus.FAILED
    assert run.error_code == "X_JOB_UNKNOWN"
    assert f"job {NAME!r} has no version 2 registered here (versions: 1)" in run.error
