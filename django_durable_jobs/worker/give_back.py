"""Runs a worker gives back, queued again without using an attempt: claimed and never
begun (a batch's sync runs kept in hand, async runs claimed ahead), or left before
their job ran (a database error first, a stop at once)."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterable

from django.db import DatabaseError, connections

from .. import conf
from ..db.claims import release
from ..engine.clock import Clock
from ..models import JobRun
from .connections import close_broken_connections
from .heartbeat import Heartbeat

log = logging.getLogger("django_durable_jobs.worker")


def give_back_unbegun(
    runs: Iterable[tuple[JobRun, str]], beat: Heartbeat | None, clock: Clock, why: str
) -> None:
    """Release ``runs`` (each with the lease owner that claimed it), none of which began:
    their leases no longer renewed, each queued as it was for another worker to take; on
    a database error their leases decide."""
    for run, owner in runs:
        if beat is not None:
            beat.drop(run.id)
        with contextlib.suppress(DatabaseError):
            released = release(run, owner, now=clock.now())
            log.info("run released: run=%s %s (%s)", run.id, why, released)


def give_back_unexecuted(run: JobRun, owner: str, clock: Clock) -> None:
    """A database error before ``run`` executed: give it back at once instead of
    letting its lease expire, which would count an attempt that never was
    (X_ATTEMPTS_EXHAUSTED)."""
    with contextlib.suppress(DatabaseError):  # still down: the lease decides
        log.warning(
            "run released: run=%s database error before it executed (released=%s)",
            run.id,
            release_afresh(run, owner, clock),
        )


def release_afresh(run: JobRun, owner: str, clock: Clock) -> bool:
    """``release``, once more on a new connection if the first try raised: Django's
    error, or the driver's own, which Django lets through when closing the cursor of a
    statement that failed (MySQLdb: "Commands out of sync" from ``cursor.close()``)."""
    jobs_database = connections[conf.database()]
    driver_error = jobs_database.Database.Error  # type: ignore[attr-defined]  # the DB-API module
    try:
        return release(run, owner, now=clock.now())
    except (DatabaseError, driver_error):  # the stop or the fault cut the connection
        # A query torn by the stop can leave a connection that answers a ping but not
        # a query (MySQL: "Commands out of sync"): drop it whatever it says.
        with contextlib.suppress(DatabaseError):
            jobs_database.close()
        close_broken_connections()
        return release(run, owner, now=clock.now())
