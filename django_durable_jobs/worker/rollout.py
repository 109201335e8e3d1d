"""A rolling deploy seen from one worker: runs of jobs and versions it does not register
are left to a live worker that does, and fail only when no live worker has had them for
``UNKNOWN_JOB_GRACE``.

While every live worker runs the same code, the claim is the statement it always was
(and costs what it always did). The worker filters its claim by the (job, version) pairs
it registers (``db/executable.py``) only once it knows there are others:

- its heartbeat reads what every live worker registers (``presence.live_registries``):
  a worker with a pair this one lacks is a deploy under way, old or new code;
- a claim returned a run it cannot execute: the web processes of a new deploy
  enqueue a new job before any worker has it. The run is given back untouched
  (``claims.give_back``: its attempt and wake time as they were) and the filter stays
  on for the grace and a lease more, long enough for the run to be taken or to fail.

A run given back, or left out by the filter, is claimed again by this worker only
once it has been runnable for the grace while no live worker registers its pair; the
worker then executes it, which fails it with ``X_JOB_UNKNOWN`` naming the job and
version (``execution``).
"""

from __future__ import annotations

import logging
import time
from datetime import datetime, timedelta

from django.db import DatabaseError

from .. import conf
from ..db.claims import give_back
from ..db.executable import Executable, Pair, pairs_of
from ..definitions.registry import versions_by_name
from ..models import JobRun
from .presence import live_registries

log = logging.getLogger("django_durable_jobs.worker")


class Rollout:
    """What one worker process knows of the other workers' code.

    ``heard`` is called from the heartbeat thread, the rest from the worker's loop; each
    writes whole attributes, which the other side reads without a lock.
    """

    def __init__(self, jobs: dict[str, list[int]], *, grace: timedelta, lease: timedelta) -> None:
        #: What this worker registers: job name -> versions (``Worker.jobs``), as pairs.
        self.jobs, self.mine = jobs, pairs_of(jobs)
        self.grace, self.lease = grace, lease
        #: Every pair a live worker registers, this one's included (as last heard), and
        #: whether some are not this one's: another deploy's workers are about.
        self.anyone: frozenset[Pair] = self.mine
        self.others = False
        #: Until when (monotonic) the claim is filtered after a run it could not execute.
        self.until = 0.0

    @classmethod
    def of_this_process(cls, lease: timedelta) -> Rollout:
        """The jobs this process registers, ``UNKNOWN_JOB_GRACE`` from the settings."""
        grace = conf.duration("UNKNOWN_JOB_GRACE") or timedelta(0)
        return cls(versions_by_name(), grace=grace, lease=lease)

    def heard(self, registries: dict[str, frozenset[Pair]]) -> None:
        """What every live worker registers (``presence.live_registries``)."""
        anyone = frozenset().union(self.mine, *registries.values())
        self.anyone, self.others = anyone, bool(anyone - self.mine)

    @property
    def filtering(self) -> bool:
        """Whether the claim must be filtered: a live worker registers a pair this one
        lacks, or a claim returned a run it could not execute not long ago."""
        return self.others or (self.until > 0 and time.monotonic() < self.until)

    def only(self, now: datetime) -> Executable | None:
        """The claim's filter at ``now``, or None for the usual claim."""
        if not self.filtering:
            return None
        return Executable(self.mine, self.anyone, now - self.grace)

    def executable(self, runs: list[JobRun], owner: str, now: datetime) -> list[JobRun]:
        """``runs`` without those this worker must leave to others: each run of a pair
        it lacks is given back, unless no live worker registers the pair and the run has
        been runnable for the grace (then it stays, to fail with ``X_JOB_UNKNOWN``)."""
        strangers = [run for run in runs if (run.job_name, run.job_version) not in self.mine]
        if not strangers:
            return runs
        self.until = time.monotonic() + (self.grace + self.lease).total_seconds()
        registries = live_registries(now=now, lease=self.lease)
        self.heard(registries)
        kept = [run for run in runs if run not in strangers]
        for run in strangers:
            pair = (run.job_name, run.job_version)
            others = sorted(w for w, pairs in registries.items() if pair in pairs)
            due_since = run.wake_at or run.created_at
            if not others and now - due_since >= self.grace:
                kept.append(run)  # nobody has it, and not for the grace: it fails
                continue
            try:
                given = give_back(run, owner)
            except DatabaseError:  # its lease gives it back; the attempt it used is lost
                log.warning("run %s: not given back (its lease will be)", run.id)
                continue
            log.info(
                "run left to other workers: run=%s job=%s version=%s (not registered here; "
                "%s) given_back=%s",
                run.id,
                run.job_name,
                run.job_version,
                f"live workers with it: {', '.join(others)}"
                if others
                else f"no live worker has it: it fails once runnable for {self.grace}",
                given,
            )
        return kept
