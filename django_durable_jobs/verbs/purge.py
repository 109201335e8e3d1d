"""Purge: delete finished runs older than an age, with what references them, in
batches (``db/purge.py`` holds each batch's SQL). ``jobs purge`` and the retention
schedule (``retention.py``) call it."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import replace
from datetime import datetime

from .. import conf
from ..db import dialect
from ..db.purge import Batch
from ..engine import clock
from ..engine.durations import Duration, before, parse_duration
from ..models import FINISHED

#: Runs a purge deletes per transaction (with their step records, messages and keys).
PURGE_BATCH = 1000
#: Seconds a purge rests between two batches, so the workers' claims and finishes are
#: not queued behind its writes (benchmarks/README.md, "Purging the history").
PURGE_PAUSE = 0.0


def purge(
    older_than: Duration,
    statuses: Iterable[str] = FINISHED,
    *,
    now: datetime | None = None,
    batch_size: int = PURGE_BATCH,
    pause: float = PURGE_PAUSE,
    progress: Callable[[int], None] | None = None,
) -> int:
    """Delete finished runs that finished more than ``older_than`` ago, with what
    references them (step records, messages, cancel and idempotency keys; their
    children stay, without a parent), ``batch_size`` runs a transaction, oldest first,
    resting ``pause`` seconds between batches; returns how many runs were deleted.
    ``progress`` is called after each batch with the count so far.

    Left alone: runs a worker still holds (a cancelled run its worker has not let go
    of), and the children of a live parent, which may still read them. Each batch is
    set-based SQL (``db/purge.py``; one statement on PostgreSQL).

    >>> purge("30d")  # doctest: +SKIP
    """
    wanted = _finished_statuses(statuses)
    cutoff = before(now or clock.current().now(), parse_duration(older_than), older_than)
    database, total = dialect.of(conf.database()), 0
    for status in wanted:
        batch = Batch(status, cutoff, batch_size)
        while (done := database.purge_batch(batch)).runs:
            total += done.runs
            batch = replace(batch, after=done.reached)
            if progress is not None:
                progress(total)
            if pause > 0:
                time.sleep(pause)
    return total


def _finished_statuses(statuses: Iterable[str]) -> list[str]:
    wanted = [str(status) for status in statuses]
    unfinished = [status for status in wanted if status not in FINISHED]
    if unfinished or not wanted:
        raise ValueError(
            f"purge deletes finished runs only ({', '.join(FINISHED)}); got {unfinished or wanted}"
        )
    return wanted
