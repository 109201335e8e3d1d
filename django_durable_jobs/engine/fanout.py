"""Fan-out: ``step.invoke_all`` and ``step.map`` start many child runs in one step and
suspend until the last one finishes. No Django import (the ORM side is
``invocations.py``).

The children are started in one bulk insert, each under an idempotency key made of
the parent, the step and the child's position, so a worker killed half-way through
starting them (or a replay) starts each child exactly once. The parent is woken
once, by the last child to finish (``invocations.last_sibling``), plus the usual safety
poll (``EVENT_POLL``).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import replace
from datetime import timedelta
from typing import Any

from ..exceptions import ChildRunFailed, JobTimeoutError, Suspension
from .core import Io, Plan, _executions
from .durations import Duration, format_duration, parse_duration
from .records import Call, ChildBatches, ChildOutcome, RecordedStep
from .steps import StepEngine
from .vocabulary import StepKind, StepStatus


def key_prefix(parent_run_id: str, step: str) -> str:
    """The idempotency-key prefix of one fan-out's children (the step name hashed, so
    that steps "a" and "a:1" cannot share a prefix and the key stays short)."""
    digest = hashlib.sha256(step.encode()).hexdigest()[:16]
    return f"fanout:{parent_run_id}:{digest}:"


def calls_of(calls: Sequence[Any], where: str) -> list[Call]:
    checked = list(calls)
    for index, call in enumerate(checked):
        if not isinstance(call, Call):
            raise TypeError(
                f"{where}: item {index} is {call!r}; pass job.call(*args, **kwargs) values"
            )
    return checked


def invoke_all(
    steps: StepEngine, name: str, calls: Sequence[Any], timeout: Duration
) -> Plan[list[Any]]:
    """The plan of ``Steps.invoke_all`` and ``AsyncSteps.invoke_all``; see there."""
    batches = steps._batches
    if batches is None:
        raise RuntimeError("step.invoke_all needs child runs; this engine has none")
    checked = calls_of(calls, f"job {steps.job_name!r} step {name!r}")
    return (yield from _plan(steps, batches, name, checked, parse_duration(timeout)))


def _plan(
    steps: StepEngine, batches: ChildBatches, name: str, calls: list[Call], limit: timedelta
) -> Plan[list[Any]]:
    existing = yield from steps._begin(name)
    if existing is not None and existing.status is StepStatus.COMPLETED:
        return list(steps._replay(existing))
    with steps._span(name, StepKind.FANOUT, existing):
        now = steps._clock.now()
        # Like a wait: each look (the safety poll, the last child's wake-up) is the same
        # execution; only a run that failed here and retries counts another.
        attempts = _executions(existing) if existing is not None else 1
        if existing is None or not isinstance(existing.output, dict):
            ids = yield Io(lambda: batches.start_all(steps.run_id, name, calls), write=True)
            started_at = now
        else:
            ids, started_at = list(existing.output["children"]), existing.started_at
        record = RecordedStep(
            run_id=steps.run_id,
            name=name,
            kind=StepKind.FANOUT,
            status=StepStatus.WAITING,
            started_at=started_at,
            attempts=attempts,
            output={"children": ids},
            deadline=started_at + limit,
        )
        outcomes = yield Io(lambda: batches.outcomes(steps.run_id, name, ids))
        if all(outcome is not None for outcome in outcomes):
            return (yield from _finish(steps, record, name, ids, outcomes, now))
        if now >= started_at + limit:
            left = sum(outcome is None for outcome in outcomes)
            timed_out = JobTimeoutError(
                f"job {steps.job_name!r} run {steps.run_id}: step {name!r}: {left} of {len(ids)} "
                f"child runs did not finish within {format_duration(limit)}"
            )
            yield from steps._fail(record, timed_out)
            raise timed_out
        wake_at = min(started_at + limit, now + steps._limits.event_poll)
        yield from steps._save(replace(record, wake_at=wake_at))
        raise Suspension(name, wake_at, StepKind.FANOUT)


def _finish(
    steps: StepEngine,
    record: RecordedStep,
    name: str,
    ids: list[str],
    outcomes: Sequence[ChildOutcome | None],
    now: Any,
) -> Plan[list[Any]]:
    failed = [(i, o) for i, o in enumerate(outcomes) if o is not None and not o.succeeded]
    if failed:
        index, outcome = failed[0]
        message = outcome.error.message if outcome.error else "unknown error"
        error = ChildRunFailed(
            f"job {steps.job_name!r} run {steps.run_id}: step {name!r}: {len(failed)} of "
            f"{len(ids)} child runs failed; the first is child {index} (run {ids[index]}): "
            f"{message}"
        )
        yield from steps._fail(record, error)
        raise error
    results = [outcome.result for outcome in outcomes if outcome is not None]
    done = replace(record, status=StepStatus.COMPLETED, output=results, completed_at=now)
    yield from steps._save(done)
    return results
