"""An operator's reruns on a run's trace (``JobRun.reruns``): the idle gaps between an
attempt's end and the retry or replay that ran the run again, and the parts of a bar
(the run's, a step's) that fell before each gap."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from ..models import JobRun
from .axis import Axis, Bar
from .formatting import short_duration


@dataclass(frozen=True)
class Piece:
    """Part of a bar before an operator ran the run again: an earlier attempt's, in
    the colour of how that attempt ended."""

    bar: Bar
    status: str


@dataclass(frozen=True)
class Gap:
    """The idle time between an attempt's end and an operator's rerun of the run
    (``JobRun.reruns``): drawn empty on the axis, labelled."""

    bar: Bar
    ended_at: datetime
    again_at: datetime
    #: How the attempt before ended ("failed", "cancelled", "succeeded").
    status: str
    #: "retry" or "replay".
    by: str

    @property
    def label(self) -> str:
        done = "retried" if self.by == "retry" else "replayed"
        return f"{done} by operator after {short_duration(self.again_at - self.ended_at)}"


def read(run: JobRun, axis: Axis) -> tuple[Gap, ...]:
    """``run.reruns`` as gaps on ``axis``, in order; an entry this code cannot read is
    left out rather than break the page."""
    return tuple(
        Gap(axis.bar(ended, again), ended, again, status, by)
        for ended, again, status, by in instants(run)
    )


def instants(run: JobRun) -> list[tuple[datetime, datetime, str, str]]:
    """``run.reruns`` read: (ended, run again, how it had ended, by which verb), in
    order (the axis is made to hold each run-again instant)."""
    found = []
    for entry in run.reruns or ():
        try:
            ended = datetime.fromisoformat(entry["ended"])
            again = datetime.fromisoformat(entry["again"])
            found.append((ended, again, str(entry["status"]), str(entry["by"])))
        except (KeyError, TypeError, ValueError):
            continue
    return sorted(found)


def cut(
    began: datetime, until: datetime | None, gaps: Sequence[Gap], axis: Axis
) -> tuple[tuple[Piece, ...], datetime]:
    """A span from ``began`` cut at each gap it spans (its end, ``until``, after the
    rerun; None: still going): the pieces before the gaps, each in the colour of how
    its attempt ended, and where the last part begins."""
    pieces = []
    for gap in gaps:
        if began <= gap.ended_at and (until is None or gap.again_at <= until):
            pieces.append(Piece(axis.bar(began, gap.ended_at), gap.status))
            began = gap.again_at
    return tuple(pieces), began
