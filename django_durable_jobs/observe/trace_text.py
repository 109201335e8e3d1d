"""A run's trace for the terminal and for machines (``manage.py jobs show``): a plain
text table (coloured by the caller), a summary of the run, and JSON."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

from ..engine.serialization import error_line
from ..models import FINISHED, JobRun, RunStatus, StepStatus
from .progress import progress_text
from .run_keys import flow_keys, key_pairs
from .trace import StepRow, Trace, clip, short_duration, stamp
from .wakes import wakes

Paint = Callable[[str, str], str]
STEP_HEADERS = (
    "#",
    "step",
    "status",
    "attempts",
    "started",
    "took",
    "replayed",
    "wake / event",
    "error",
)


#: What ``jobs show`` and the admin's run page call ``JobRun.unreached_steps``.
UNREACHED = "steps not reached by the code that finished this run"


def step_cells(row: StepRow) -> tuple[str, ...]:
    tags = [tag for tag, shown in (("atomic", row.atomic), ("patch", row.patch)) if shown]
    return (
        str(row.number),
        row.name + "".join(f" ({tag})" for tag in tags),
        row.status,
        str(row.attempts),
        stamp(row.started_at),
        row.took_text,
        "replayed" if row.replayed else ("not reached" if row.unreached else ""),
        row.wake_text,
        clip(row.error_line, 80),
    )


def text_table(
    headers: Sequence[str],
    rows: Sequence[Sequence[str]],
    *,
    paint: Paint | None = None,
    status_column: int | None = None,
) -> list[str]:
    """Left-aligned columns; ``paint(status, padded_text)`` colours a row's status cell."""
    widths = [len(h) for h in headers]
    for cells in rows:
        widths = [max(w, len(c)) for w, c in zip(widths, cells, strict=True)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)).rstrip()]
    for cells in rows:
        padded = [c.ljust(w) for c, w in zip(cells, widths, strict=True)]
        if paint is not None and status_column is not None:
            padded[status_column] = paint(cells[status_column], padded[status_column])
        lines.append("  ".join(padded).rstrip())
    return lines


def no_steps_line(run: JobRun) -> str:
    """What ``jobs show`` says for a run without a step: "yet" only while it may still
    record one (a job can fail, say on its return value, before its first step)."""
    if run.status not in FINISHED:
        return "no steps recorded yet"
    if run.started_at is None:
        return f"no steps: the run was {run.status} before it started"
    return f"no steps: the run {FINISHED_VERBS[run.status]} without recording a step"


#: "the run failed", "the run was cancelled".
FINISHED_VERBS: dict[str, str] = {
    RunStatus.SUCCEEDED: "succeeded",
    RunStatus.FAILED: "failed",
    RunStatus.CANCELLED: "was cancelled",
    RunStatus.SKIPPED: "was skipped",
}


def wakes_cell(run: JobRun, deadline: datetime | None) -> str:
    """When the run wakes (``observe/wakes.py``): ``by 2026-01-08 00:00:00`` for a
    waiting run's deadline, the wake time of a queued or sleeping one, else ""."""
    due = wakes(run, deadline)
    return "" if due is None else " ".join(filter(None, (due[0], stamp(due[1]))))


def _wakes_text(trace: Trace) -> str:
    waiting = [s.deadline for s in trace.steps if s.status == StepStatus.WAITING and s.deadline]
    cell = wakes_cell(trace.run, waiting[-1] if waiting else None)
    return f"  wakes {cell}" if cell else ""


def summary_lines(trace: Trace) -> list[str]:
    run = trace.run
    lines = [
        f"run {run.id}  {run.job_name}  {run.status}  attempt {trace.attempts_text}  "
        f"queue {run.queue}  version {run.job_version}",
        "  ".join(
            f"{label} {stamp(when)}"
            for label, when in (
                ("created", run.created_at),
                ("started", run.started_at),
                ("finished", run.finished_at),
            )
            if when is not None
        )
        + _wakes_text(trace)
        + (f"  took {short_duration(trace.took)}" if trace.took is not None else ""),
    ]
    if keys := key_pairs(run):  # its job's limits at enqueue (docs/how-to/flow-control.md)
        lines.append("  ".join(f"{label} {text}" for label, text in keys))
    if run.progress is not None:  # ctx.set_progress: a bar's words, or the JSON
        lines.append("progress " + progress_text(run.progress, 200))
    if run.status == RunStatus.SUCCEEDED:
        lines.append("result " + clip(json.dumps(run.result, ensure_ascii=False), 200))
    if run.error_code or run.error:
        lines.append(
            "error " + error_line(run.error_type, clip(run.error, 200), code=run.error_code)
        )
    # Each time an operator ran it again: the idle time the timeline leaves empty.
    lines.extend(
        f"{gap.label} ({gap.status} {stamp(gap.ended_at)}, again {stamp(gap.again_at)})"
        for gap in trace.gaps
    )
    return lines


def as_json(trace: Trace) -> dict[str, Any]:
    """The trace for machines (``jobs show --json``): times ISO 8601, durations in seconds."""
    run = trace.run
    return {
        "id": str(run.id),
        "job": run.job_name,
        "job_version": run.job_version,
        "queue": run.queue,
        "status": run.status,
        "attempt": run.attempt,
        "max_attempts": trace.max_attempts,
        "args": run.args,
        "kwargs": run.kwargs,
        "result": run.result,
        # What the job last told with ctx.set_progress (any JSON; null: nothing).
        "progress": run.progress,
        "error_code": run.error_code,
        "error_type": run.error_type,
        "error": run.error,
        "idempotency_key": run.idempotency_key,
        # Flow-control keys, only those the run holds: "concurrency_key", "throttle_key",
        # "rate_limit_key", "debounce_key" ("": the limit counts every run of the job).
        **flow_keys(run),
        "created_at": _iso(run.created_at),
        "started_at": _iso(run.started_at),
        "finished_at": _iso(run.finished_at),
        "wake_at": _iso(run.wake_at),
        # Completed steps the attempt that finished the run never reached (a deploy
        # renamed or removed them); each also has "unreached": true among "steps".
        "unreached_steps": list(trace.unreached),
        # Each time an operator ran the finished run again (retry, replay), oldest first:
        # when and how the attempt before ended, and when it was run again.
        "reruns": [
            {
                "ended_at": _iso(gap.ended_at),
                "status": gap.status,
                "again_at": _iso(gap.again_at),
                "by": gap.by,
            }
            for gap in trace.gaps
        ],
        "steps": [
            {
                "name": row.name,
                "kind": row.step_kind,
                "status": row.status,
                "attempts": row.attempts,
                "started_at": _iso(row.started_at),
                "completed_at": _iso(row.ended_at) if row.status == StepStatus.COMPLETED else None,
                "took": row.took.total_seconds() if row.took is not None else None,
                "replayed": row.replayed,
                "unreached": row.unreached,
                "wake_at": _iso(row.wake_at),
                "event": row.event or None,
                "key": row.key,
                "child": row.child,
                "output": row.output,
                "error_type": row.error_type,
                "error": row.error,
                "traceback": row.traceback,
                # Fan-out steps only: their child runs, in call order.
                **(
                    {"children": [{"id": c.id, "status": c.status} for c in row.children]}
                    if row.children
                    else {}
                ),
            }
            for row in trace.steps
        ],
    }


def _iso(when: datetime | None) -> str | None:
    return None if when is None else when.isoformat()


def unreached_lines(trace: Trace) -> list[str]:
    """``JobRun.unreached_steps`` under the step table (``jobs show``); none if none."""
    if not trace.unreached:
        return []
    return [
        f"{UNREACHED} (renamed or removed by a deploy while it was in flight):",
        *(f"  {name}" for name in trace.unreached),
    ]


def children_lines(trace: Trace) -> list[str]:
    """Each fan-out step's child runs (``jobs show``), under the step table."""
    lines: list[str] = []
    for row in trace.steps:
        if row.children:
            lines.append(f"{row.name}: {row.fanout_text}")
            lines.extend(f"  {index}  {c.id}  {c.status}" for index, c in enumerate(row.children))
    return lines
