"""Migration 0013 moves an ``invoke`` step's child run id out of ``correlation_key``
into ``StepRecord.child``, and back when unapplied; a wait's key stays where it is."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.utils import timezone

APP = "django_durable_jobs"
BEFORE = [(APP, "0012_step_last_started_at")]
AFTER = [(APP, "0013_step_child")]

pytestmark = pytest.mark.django_db(transaction=True)


def _migrate(target: list[tuple[str, str]]) -> MigrationExecutor:
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(target)
    executor.loader.build_graph()
    return executor


@pytest.fixture
def at_0012() -> Iterator[MigrationExecutor]:
    executor = _migrate(BEFORE)
    yield executor
    _migrate(executor.loader.graph.leaf_nodes(APP))


def test_0013_moves_invoke_children_out_of_the_event_key(at_0012: MigrationExecutor) -> None:
    old = at_0012.loader.project_state(BEFORE).apps
    Run, Step = old.get_model(APP, "JobRun"), old.get_model(APP, "StepRecord")
    now = timezone.now()
    parent = Run.objects.create(job_name="tests.parent", created_at=now)
    child = uuid.uuid4()
    common = {"run": parent, "started_at": now, "status": "waiting"}
    Step.objects.create(name="call", kind="invoke", correlation_key=str(child), **common)
    Step.objects.create(
        name="wait", kind="wait", event="order.paid", correlation_key="42", **common
    )

    new = _migrate(AFTER).loader.project_state(AFTER).apps.get_model(APP, "StepRecord")
    call, wait = new.objects.get(name="call"), new.objects.get(name="wait")
    assert (call.child, call.correlation_key) == (child, None)
    assert (wait.child, wait.correlation_key) == (None, "42")

    back = _migrate(BEFORE).loader.project_state(BEFORE).apps.get_model(APP, "StepRecord")
    assert back.objects.get(name="call").correlation_key == str(child)
    assert back.objects.get(name="wait").correlation_key == "42"
