"""What the operator's verbs (``runs.py``) do to a run's child runs and to its parent.

A child run started by ``step.invoke`` carries the idempotency key
``invoke:<parent>:<step>``, so a parent that replays the step finds the same child
instead of starting a second one. When the operator asks for the step to run again
(``retry`` after the child failed, ``replay_from`` that forgets the step) the key
must let go of the old child, or the step would attach to it and fail again at once.
"""

from __future__ import annotations

import uuid
from collections.abc import Collection
from datetime import datetime
from typing import Any

from .. import conf
from ..db import doorbell
from ..engine.vocabulary import StepKind
from ..models import (
    FINISHED,
    JobRun,
    JobRunQuerySet,
    RunStatus,
    StepRecord,
    StepRecordQuerySet,
    StepStatus,
)


def release_failed(parents: Collection[uuid.UUID]) -> int:
    """``retry``: the children that failed or were cancelled give up their keys and the
    steps that invoked them forget them, so those steps start new children (also after
    the parent was cancelled with its children). Unfinished children stay attached.

    A fan-out step that did not complete forgets its list of children: it starts its
    children again, and the bulk insert skips every key still held, so only the failed
    or cancelled children get a new run and the others (finished or not) keep theirs."""
    _steps().filter(run_id__in=parents, kind=StepKind.FANOUT).exclude(
        status=StepStatus.COMPLETED
    ).update(output=None)
    failed = list(
        _runs()
        .filter(parent_id__in=parents, status__in=(RunStatus.FAILED, RunStatus.CANCELLED))
        .values_list("pk", flat=True)
    )
    if not failed:
        return 0
    _steps().filter(run_id__in=parents, kind=StepKind.INVOKE, child__in=failed).exclude(
        status=StepStatus.COMPLETED
    ).update(child=None)
    return _runs().filter(pk__in=failed).update(idempotency_key=None)


def release_forgotten(parent: uuid.UUID) -> int:
    """``replay_from``: every child not invoked by a step the run still remembers gives
    up its key (call it after the forgotten steps are deleted)."""
    kept = (
        _steps()
        .filter(run_id=parent, kind=StepKind.INVOKE)
        .exclude(child=None)
        .values_list("child", flat=True)
    )
    return (
        _runs()
        .filter(parent_id=parent)
        .exclude(pk__in=list(kept))
        .exclude(idempotency_key=None)
        .update(idempotency_key=None)
    )


def fresh_windows(runs: Collection[uuid.UUID]) -> int:
    """``retry`` and ``replay_from``: waits, receives, invokes and fan-outs that did not
    complete forget their deadline; the engine opens a new window (the step's timeout
    from now) when it meets them, instead of failing again at once because the old one
    has passed."""
    return (
        _steps()
        .filter(
            run_id__in=runs,
            kind__in=(StepKind.WAIT, StepKind.RECEIVE, StepKind.INVOKE, StepKind.FANOUT),
        )
        .exclude(status=StepStatus.COMPLETED)
        .update(deadline=None)
    )


def wake_parents(parents: Collection[uuid.UUID | None], now: datetime) -> int:
    """Children finished or were cancelled: their parents, waiting in ``step.invoke``,
    run now."""
    wanted = [parent for parent in parents if parent is not None]
    if not wanted:
        return 0
    woken = _runs().filter(pk__in=wanted).wake_waiting(now)
    if woken:
        doorbell.ring(conf.database())
    return woken


def cancel_descendants(root: uuid.UUID, stopped: dict[str, Any]) -> list[uuid.UUID]:
    """Cancel every unfinished run below ``root`` (children, their children, ...) with
    the column values ``stopped``; returns their ids. Like ``runs.cancel``: a run in a
    worker's hands keeps its lease and is stopped by that worker at its next step."""
    cancelled: list[uuid.UUID] = []
    level = [root]
    while level:
        below = list(_runs().filter(parent_id__in=level).values_list("pk", "status"))
        unfinished = [pk for pk, status in below if status not in FINISHED]
        _runs().filter(pk__in=unfinished).cancel(stopped)
        cancelled.extend(unfinished)
        level = [pk for pk, _ in below]
    return cancelled


def _runs() -> JobRunQuerySet:
    return JobRun.objects.using(conf.database())


def _steps() -> StepRecordQuerySet:
    return StepRecord.objects.using(conf.database())


__all__ = [
    "cancel_descendants",
    "fresh_windows",
    "release_failed",
    "release_forgotten",
    "wake_parents",
]
