"""A run's trace: its steps as rows on one time axis, for the admin's timeline and
``manage.py jobs show`` (its text and JSON forms are in ``trace_text``).

``build`` is a pure function of a run, its step records and ``now``; ``load`` reads
a run's steps (one query). Which steps count as *replayed* is derived from what the
records prove, see ``replayed_flags``.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any

from ..definitions.registry import find_job
from ..definitions.registry import max_attempts as of_definition
from ..engine import clock
from ..engine.fanout import key_prefix
from ..engine.serialization import error_line, shown_type
from ..engine.vocabulary import StepKind
from ..models import FINISHED, JobRun, RunStatus, StepRecord, StepStatus
from . import reruns
from .axis import Axis, Bar, Tick
from .formatting import JSON_LIMIT, clip, pretty_json, short_duration, stamp
from .reruns import Gap, Piece

__all__ = [
    "JSON_LIMIT",
    "Bar",
    "Gap",
    "Piece",
    "Tick",
    "clip",
    "pretty_json",
    "short_duration",
    "stamp",
]


@dataclass(frozen=True)
class Child:
    """One child run of a fan-out step (``step.invoke_all`` / ``step.map``)."""

    id: str
    status: str

    @property
    def finished(self) -> bool:
        return self.status in FINISHED


@dataclass(frozen=True, kw_only=True)
class StepRow:
    """One step as the trace shows it."""

    number: int
    name: str
    status: str
    #: "run" (``step.run``), "sleep" or "wait": decides how the bar is drawn.
    kind: str
    attempts: int
    started_at: datetime
    #: When it completed; for a sleeping step the wake time. None: not known (failed).
    ended_at: datetime | None
    took: timedelta | None
    replayed: bool
    wake_at: datetime | None
    #: When a wait (or a child run) gives up.
    deadline: datetime | None
    event: str
    key: str | None
    #: The run an ``invoke`` step started.
    child: str | None
    output: Any
    error: str
    error_type: str
    traceback: str
    bar: Bar
    #: A fan-out step's child runs, in call order (empty for other steps).
    children: tuple[Child, ...] = ()
    #: The bar's parts before an operator's rerun it spans (``bar`` is then the
    #: part after the last one): the idle time between is drawn empty.
    earlier: tuple[Piece, ...] = ()
    #: What the step is (``StepKind``): "atomic" steps are drawn as "run" ones.
    step_kind: str = "run"
    #: Completed, and never reached by the attempt that finished the run (renamed or
    #: removed by a deploy: ``JobRun.unreached_steps``).
    unreached: bool = False

    @property
    def atomic(self) -> bool:
        """Its function's writes to the jobs database committed with its record."""
        return self.step_kind == StepKind.ATOMIC

    @property
    def patch(self) -> bool:
        """The run's answer to ``ctx.patched``: which code it follows there."""
        return self.step_kind == StepKind.PATCH

    @property
    def fanout_text(self) -> str:
        done = sum(child.finished for child in self.children)
        return f"{done} of {len(self.children)} child runs finished"

    @property
    def output_json(self) -> str:
        return pretty_json(self.output)

    @property
    def output_preview(self) -> str:
        return clip(json.dumps(self.output, ensure_ascii=False), 60)

    @property
    def has_output(self) -> bool:
        return self.status == StepStatus.COMPLETED and self.kind != StepKind.SLEEP

    @property
    def took_text(self) -> str:
        return short_duration(self.took) if self.took is not None else ""

    @property
    def wake_text(self) -> str:
        """The wake time of a sleep, or what a wait is (or was) waiting for."""
        if self.kind == StepKind.WAIT:
            if self.children:
                text = self.fanout_text
            elif self.step_kind == StepKind.RECEIVE:
                text = f"message {self.event}"
            elif self.event:
                text = self.event + (f" key={self.key}" if self.key is not None else "")
            else:
                text = f"child run {self.child}"
            if self.status == StepStatus.WAITING and self.deadline is not None:
                text += f", until {stamp(self.deadline)}"
            if self.status == StepStatus.WAITING and self.wake_at is not None:
                text += f", next check {stamp(self.wake_at)}"
            return text
        if self.kind == StepKind.SLEEP and self.wake_at is not None:
            return f"until {stamp(self.wake_at)}"
        return ""

    @property
    def error_line(self) -> str:
        first = self.error.strip().splitlines()[0] if self.error.strip() else ""
        return error_line(self.error_type, first)

    @property
    def shown_type(self) -> str:
        return shown_type(self.error_type)


@dataclass(frozen=True, kw_only=True)
class Trace:
    run: JobRun
    #: From the job's definition on this process; None when the job is not registered.
    max_attempts: int | None
    steps: tuple[StepRow, ...]
    start: datetime
    end: datetime
    now: datetime
    #: The run from its first start to its end (or now); ``queued_bar``: before it.
    run_bar: Bar
    queued_bar: Bar
    ticks: tuple[Tick, ...]
    #: Steps not reached by the code that finished this run (``JobRun.unreached_steps``).
    unreached: tuple[str, ...] = ()
    #: The idle times before an operator ran the run again, and the run's attempts
    #: before them (``run_bar`` is then the attempt after the last).
    gaps: tuple[Gap, ...] = ()
    earlier_attempts: tuple[Piece, ...] = ()

    @property
    def attempts_text(self) -> str:
        return attempts_text(self.run.attempt, self.max_attempts)

    @property
    def took(self) -> timedelta | None:
        return run_duration(self.run, self.now)

    @property
    def took_text(self) -> str:
        took = self.took
        return "" if took is None else short_duration(took)

    @property
    def counts(self) -> dict[str, int]:
        """How many steps are in each status, in the order of ``StepStatus``."""
        counter = Counter(row.status for row in self.steps)
        statuses = (status.value for status in StepStatus)
        return {status: counter[status] for status in statuses if counter[status]}


def build(
    run: JobRun,
    steps: Sequence[StepRecord],
    *,
    now: datetime,
    max_attempts: int | None,
    children: Mapping[str, tuple[Child, ...]] | None = None,
) -> Trace:
    """The trace of ``run``; ``steps`` in the order each first ran (id order);
    ``children``: the child runs of each fan-out step, by step name."""
    ends = [_end(step, now) for step in steps]
    start = min([run.created_at, *(step.started_at for step in steps)])
    candidates = [start, *(end for end in ends if end is not None)]
    candidates.extend(again for _, again, _, _ in reruns.instants(run))
    if run.finished_at is not None:
        candidates.append(run.finished_at)
    if run.status not in FINISHED:
        candidates.extend(when for when in (now, run.wake_at) if when is not None)
    axis = Axis(start, max(candidates))
    flags = replayed_flags(steps)
    unreached = tuple(run.unreached_steps or ())
    gaps = reruns.read(run, axis)
    rows = tuple(
        _split(replace(row, unreached=row.name in unreached), gaps, axis)
        for row in (
            _row(number, step, end, flags[index], axis, (children or {}).get(step.name, ()))
            for index, (number, step, end) in enumerate(
                zip(range(1, len(steps) + 1), steps, ends, strict=True)
            )
        )
    )
    first_start = run.started_at or axis.end
    finished = run.finished_at or (now if run.started_at else None)
    # Each attempt before a rerun ends where its gap starts; the last starts at the rerun.
    attempts: tuple[Piece, ...] = ()
    began = run.started_at
    if began is not None:
        attempts, began = reruns.cut(began, None, gaps, axis)
    return Trace(
        run=run,
        max_attempts=max_attempts,
        steps=rows,
        start=axis.start,
        end=axis.end,
        now=now,
        run_bar=axis.bar(began, finished, open=run.status not in FINISHED),
        queued_bar=axis.bar(run.created_at, first_start),
        ticks=axis.ticks(),
        unreached=unreached,
        gaps=gaps,
        earlier_attempts=attempts,
    )


def _split(row: StepRow, gaps: Sequence[Gap], axis: Axis) -> StepRow:
    """``row`` with its bar cut at each gap it spans (a step an attempt was in when it
    ended, that the rerun ran again): the part before in the colour of that end."""
    if row.ended_at is None:
        return row  # a failed step's marker spans nothing
    earlier, began = reruns.cut(row.started_at, row.ended_at, gaps, axis)
    if not earlier:
        return row
    return replace(row, earlier=earlier, bar=axis.bar(began, row.ended_at, open=row.bar.open))


def load(run: JobRun, *, now: datetime | None = None) -> Trace:
    """Read ``run``'s steps (one query) and build its trace."""
    steps = list(StepRecord.objects.using(run._state.db).filter(run=run).order_by("id"))
    return build(
        run,
        steps,
        now=now or clock.current().now(),
        max_attempts=max_attempts(run.job_name, run.job_version),
        children=_fanout_children(run, steps),
    )


def _fanout_children(run: JobRun, steps: Sequence[StepRecord]) -> dict[str, tuple[Child, ...]]:
    """One query per fan-out step: its children's ids and statuses, in call order."""
    found: dict[str, tuple[Child, ...]] = {}
    for step in steps:
        if step.kind != StepKind.FANOUT:
            continue
        prefix = key_prefix(str(run.pk), step.name)
        rows = JobRun.objects.using(run._state.db).filter(
            parent=run, idempotency_key__startswith=prefix
        )
        keyed = rows.values_list("idempotency_key", "id", "status")
        ordered = sorted(keyed, key=lambda row: int((row[0] or "0").rsplit(":", 1)[-1]))
        found[step.name] = tuple(Child(str(pk), status) for _, pk, status in ordered)
    return found


def replayed_flags(steps: Sequence[StepRecord]) -> list[bool]:
    """Which completed steps were served from storage by a later execution.

    A job function runs from the top on every execution (a resume after a sleep or a
    wait, a retry), so every completed step before a point where the run *resumed*
    was replayed. The records prove a resume at a step that ran in more than one
    execution (more than one attempt: a retried step) or at a sleep or wait that
    completed later than it started (a wait still waiting counts one execution however
    often it looked again, so the looks leave no mark). A later execution that left
    no such mark (a retry after a failure outside any step, a worker that died) is not
    visible in the records, so those replays are not marked.
    """
    flags = [False] * len(steps)
    resumed_later = False
    for index in range(len(steps) - 1, -1, -1):
        step = steps[index]
        flags[index] = resumed_later and step.status == StepStatus.COMPLETED
        if _resumed_at(step):
            resumed_later = True
    return flags


def _resumed_at(step: StepRecord) -> bool:
    if step.attempts > 1:
        return True
    return (
        step.status == StepStatus.COMPLETED
        and _kind(step) != "run"
        and step.completed_at is not None
        and step.completed_at > step.started_at
    )


def max_attempts(job_name: str, version: int = 1) -> int | None:
    """``1 + retries`` of the job version registered on this process, or None if unknown."""
    definition = find_job(job_name, version)
    return None if definition is None else of_definition(definition)


def attempts_text(attempt: int, most: int | None) -> str:
    """``"2 / 4"``; only ``"2"`` when this process does not know the job (its module not
    imported here): the attempt is the run's own, the most its job's."""
    return str(attempt) if most is None else f"{attempt} / {most}"


def run_duration(run: JobRun, now: datetime) -> timedelta | None:
    """From the first start to the end, or to ``now`` for a running run."""
    if run.started_at is None:
        return None
    if run.finished_at is not None:
        return run.finished_at - run.started_at
    return now - run.started_at if run.status == RunStatus.RUNNING else None


def _kind(step: StepRecord) -> str:
    # "publish" steps are drawn like a run; "invoke", "fanout", "receive" ones like a wait.
    drawn_as: dict[str, str] = {
        StepKind.PUBLISH: StepKind.RUN,
        StepKind.ATOMIC: StepKind.RUN,
        StepKind.PATCH: StepKind.RUN,
        StepKind.INVOKE: StepKind.WAIT,
        StepKind.FANOUT: StepKind.WAIT,
        StepKind.RECEIVE: StepKind.WAIT,
    }
    return drawn_as.get(step.kind, step.kind)


def _end(step: StepRecord, now: datetime) -> datetime | None:
    if step.status == StepStatus.COMPLETED:
        return step.completed_at or step.started_at
    if step.status == StepStatus.SLEEPING:
        return step.wake_at or now
    if step.status == StepStatus.WAITING:
        return max(now, step.started_at)
    return None  # failed: the time of the failure is not recorded


def _row(
    number: int,
    step: StepRecord,
    end: datetime | None,
    replayed: bool,
    axis: Axis,
    children: tuple[Child, ...] = (),
) -> StepRow:
    # The latest execution's duration, not the time since a first, failed attempt.
    began = step.last_started_at or step.started_at
    took = end - began if step.status == StepStatus.COMPLETED and end else None
    still = step.status in (StepStatus.SLEEPING, StepStatus.WAITING)
    return StepRow(
        number=number,
        name=step.name,
        status=step.status,
        kind=_kind(step),
        step_kind=str(step.kind),
        attempts=step.attempts,
        started_at=step.started_at,
        ended_at=end,
        took=took,
        replayed=replayed,
        wake_at=step.wake_at,
        deadline=step.deadline,
        event=step.event,
        key=step.correlation_key,
        child=str(step.child) if step.child is not None else None,
        output=step.output,
        error=step.error,
        error_type=step.error_type,
        traceback=step.traceback,
        bar=axis.bar(step.started_at, end, open=still),
        children=children,
    )
