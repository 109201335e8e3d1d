"""``mark_starts``: a retried step is recorded as started before its function runs
(the memory store: no database)."""

from __future__ import annotations

from typing import Any

from django_durable_jobs.engine.records import StepStatus as RecordStatus
from django_durable_jobs.engine.sync_steps import STEP_LOST, MemoryEventLog, MemoryStepStore, Steps


def test_with_mark_starts_a_step_is_recorded_before_its_function_runs() -> None:
    store, events = MemoryStepStore(), MemoryEventLog()
    seen: list[Any] = []

    def look() -> str:
        seen.append(store.get("r1", "resize"))
        return "done"

    steps = Steps(run_id="r1", job_name="demo", store=store, events=events, mark_starts=True)
    assert steps.run("resize", look) == "done"
    [during] = seen
    assert during is not None and during.status is RecordStatus.FAILED
    assert during.error is not None and during.error.type == STEP_LOST
    assert "'resize' started (its attempt 1)" in during.error.message
    after = store.get("r1", "resize")
    assert after is not None and after.status is RecordStatus.COMPLETED and after.error is None
    # Without it (a first attempt), nothing is written before the function returns.
    quiet = Steps(run_id="r2", job_name="demo", store=store, events=events)
    quiet.run("resize", lambda: seen.append(store.get("r2", "resize")))
    assert seen[-1] is None
