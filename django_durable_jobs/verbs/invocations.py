"""Child runs as ``JobRun`` rows with ``parent`` set: ``step.invoke`` starts one
(``ChildRuns``), ``step.invoke_all`` a batch in one bulk insert (``ChildBatches``),
both under idempotency keys so that a replayed parent starts nothing twice; and the
rule that only the last child of a batch wakes the parent (``last_sibling``).

A verb: starting a child is enqueueing a run, so this builds on ``runs``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any
from uuid import UUID

from django.db import transaction

from .. import conf, signals
from ..db import faults
from ..db.flow import gates
from ..db.flow import keys as flow_keys
from ..db.store import CHILD_COLUMNS, child_outcome, child_run_outcome
from ..definitions.registry import JobDefinition, JobOptions, get_job, latest
from ..engine import clock
from ..engine.fanout import key_prefix
from ..engine.records import Call, ChildOutcome
from ..exceptions import StepUsageError
from ..models import FINISHED, CancelKey, JobRun, JobRunQuerySet
from .enqueue import _checked_arguments as checked_arguments
from .enqueue import enqueue_job


class OrmChildRuns:
    """``ChildRuns`` as ``JobRun`` rows with ``parent`` set; one child per parent step
    (an idempotency key), so a replayed parent never starts a second child."""

    def __init__(self, *, using: str = "default") -> None:
        self.using = using

    def start(
        self, parent_run_id: str, step: str, job: Any, args: Sequence[Any], kwargs: dict[str, Any]
    ) -> str:
        definition = job if isinstance(job, JobDefinition) else get_job(str(job))
        refuse_gated(definition, f"step {step!r}: invoke")
        child = enqueue_job(
            definition,
            args,
            kwargs,
            JobOptions(idempotency_key=f"invoke:{parent_run_id}:{step}"),
            parent=parent_run_id,
        )
        faults.hit("invoke.start", self.using)
        return str(child.id)

    def outcome(self, child_run_id: str) -> ChildOutcome | None:
        return child_run_outcome(self.using, child_run_id)


class OrmChildBatches:
    """``ChildBatches`` over ``JobRun`` rows."""

    def __init__(self, *, using: str = "default") -> None:
        self.using = using

    def start_all(self, parent_run_id: str, step: str, calls: Sequence[Call]) -> list[str]:
        """One INSERT for all children (ignoring the keys already there: a worker killed
        after it inserted them, before it recorded the step), then one read of their ids."""
        prefix, now = key_prefix(parent_run_id, step), clock.current().now()
        runs = [
            _child(call, f"{prefix}{index}", parent_run_id, now) for index, call in enumerate(calls)
        ]
        with transaction.atomic(using=self.using):
            JobRun.objects.using(self.using).bulk_create(runs, ignore_conflicts=True)
            ids = dict(self._children(parent_run_id, step).values_list("idempotency_key", "id"))
            self._add_cancel_keys(runs, ids)
        faults.hit("fanout.start", self.using)
        for run in runs:
            signals.run_enqueued.send(sender=JobRun, run=run)
        return [str(ids[run.idempotency_key]) for run in runs]

    def _add_cancel_keys(self, runs: Sequence[JobRun], ids: Mapping[str | None, UUID]) -> None:
        """``CancelOn`` of the children's jobs, as ``enqueue_job`` records it; once per
        child (a replayed insert finds the keys of the children it did not add)."""
        cancelable = [run for run in runs if get_job(run.job_name).cancel_on]
        if not cancelable:
            return
        for run in cancelable:
            run.pk = ids[run.idempotency_key]
        known = set(
            CancelKey.objects.using(self.using)
            .filter(run_id__in=[run.pk for run in cancelable])
            .values_list("run_id", flat=True)
        )
        for run in cancelable:
            if run.pk not in known:
                job = get_job(run.job_name)
                gates.add_cancel_keys(run, job, run.args, run.kwargs, self.using)

    def outcomes(
        self, parent_run_id: str, step: str, ids: Sequence[str]
    ) -> list[ChildOutcome | None]:
        rows = {
            str(row["id"]): row
            for row in self._children(parent_run_id, step).values("id", *CHILD_COLUMNS)
        }
        return [child_outcome(rows.get(child)) for child in ids]

    def _children(self, parent_run_id: str, step: str) -> JobRunQuerySet:
        return JobRun.objects.using(self.using).filter(
            parent_id=UUID(parent_run_id),
            idempotency_key__startswith=key_prefix(parent_run_id, step),
        )


def refuse_gated(job: JobDefinition, what: str) -> None:
    """A child run is awaited by its parent: a job whose enqueue may skip the run (rate
    limit) or hand back another's (debounce) cannot be one. Without this, a skipped child
    left its parent waiting until the step's timeout, and a debounced one gave two
    parents one child's result."""
    if gates.gated(job):
        raise StepUsageError(
            f"{what} of job {job.name!r}: it has a rate_limit or debounce, which a child "
            "run cannot have (its parent waits for it); enqueue its runs from a step instead"
        )


def _child(call: Call, key: str, parent_run_id: str, now: datetime) -> JobRun:
    job = latest(call.job) if isinstance(call.job, JobDefinition) else get_job(str(call.job))
    refuse_gated(job, f"child {key}: a fan-out")
    checked = checked_arguments(job, call.args, call.kwargs, where=f"child {key}: ")
    args, kwargs = checked.args, checked.kwargs
    run = JobRun.new(
        job_name=job.name,
        job_version=job.version,
        queue=job.queue,
        priority=job.priority,
        args=args,
        kwargs=kwargs,
        idempotency_key=key,
        created_at=now,
        wake_at=now,
        parent_id=parent_run_id,
    )
    # As enqueue_job does: a child is under its job's concurrency limit and throttle.
    flow_keys.stamp(run, job, args, kwargs)
    return run


def last_sibling(run: JobRun) -> bool:
    """Whether the finished child ``run`` should wake its parent: always for a child of
    ``step.invoke``; for a fan-out child, only when none of its siblings is unfinished
    (each child writes its own status before it asks, so the last one sees them all)."""
    key = run.idempotency_key or ""
    if run.parent_id is None or not key.startswith("fanout:"):
        return True
    prefix = key[: key.rindex(":") + 1]
    siblings = JobRun.objects.using(conf.database()).filter(
        parent_id=run.parent_id, idempotency_key__startswith=prefix
    )
    return not siblings.exclude(status__in=FINISHED).exists()
