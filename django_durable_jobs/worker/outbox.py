"""The outcome a worker holds between two claims, and the one place it is written
with the next claim: on PostgreSQL in the claim's own statement (one round trip per
run), elsewhere just before it.

The outcome is written under the lease owner that holds the run (``Outbox.owner``),
which becomes the next claim's owner only once the claim ran: if the statement
raises, the outcome stays here, under the owner whose lease still covers it.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

from django.db import DatabaseError

from .. import conf, faults
from ..db import dialect, flow, postgres
from ..db.claims import claim, release
from ..engine.clock import Clock
from ..models import JobRun
from .outcome import UNSTORABLE, Executed, Pending, settle
from .recording import log_outcome, record, record_patiently, refused

log = logging.getLogger("django_durable_jobs.worker")


class Outbox:
    """One worker process's unwritten outcome and the lease owner it is fenced by."""

    def __init__(self, lease: timedelta, queues: list[str] | None, clock: Clock) -> None:
        self.lease = lease
        self.queues = queues
        self.clock = clock
        self.owner = ""
        self.pending: Pending | None = None
        #: What the last outcome written came to (None: not written, or none yet).
        self.settled: Executed | None = None
        #: PostgreSQL: whether the last claim saw runs under a limit due (the next one
        #: then asks the flow claim first); True until a claim said otherwise.
        self.limited_waiting = True

    def record_and_claim(
        self, pending: Pending | None, owner: str, now: datetime, limit: int = 1
    ) -> list[JobRun]:
        """Record ``pending`` (fenced by ``self.owner``, whose lease it holds) and claim
        for ``owner``. ``self.owner`` only becomes ``owner`` once the statement ran: if it
        raises, the outcome stays pending under the owner that still holds its lease.

        Runs under a flow-control limit are claimed first (``flow.claim_limited`` locks
        their key); on PostgreSQL the outcome of a run that held a concurrency slot is
        written by that call, another outcome by the claim's statement, and one that
        starts an ``on_failure`` handler on its own (``Pending.fused``)."""
        using = conf.database()
        self.settled = None
        if pending is not None:
            faults.hit("outcome.before", using)
        fused = dialect.of(using).fused
        if pending is not None and not (fused and pending.fused):
            self.settled = record(pending, self.owner)
            pending = self.pending = None
            faults.hit("outcome.after", using)
        if fused:
            fused_outcome = self._fused(pending, owner, now, limit, using)
            if fused_outcome is None:
                return []  # the outcome was refused: written in short next time
            runs, recorded, pending = fused_outcome
        elif limit == 0:  # only the outcome (``execution.execute``)
            runs, recorded = [], False
        else:
            runs = claim(
                owner,
                now=now,
                lease=self.lease,
                queues=self.queues,
                clock=self.clock,
                limit=limit,
            )
            recorded = False  # pending was None here: recorded on its own above
        previous, self.owner, self.pending = self.owner, owner, None
        if pending is not None:
            faults.hit("outcome.after", using)
            self.settled = settle(pending, recorded, previous)
            log_outcome(pending.run, self.settled)
        return runs

    def _fused(
        self, pending: Pending | None, owner: str, now: datetime, limit: int, using: str
    ) -> tuple[list[JobRun], bool, Pending | None] | None:
        """PostgreSQL: claim (and record ``pending``) in as few calls as can be. Runs
        under a limit are asked for only when the last claim saw some due
        (``limited_waiting``) or ``pending`` frees a concurrency slot (then that call
        records it); otherwise one statement claims and records. Returns the runs,
        whether ``pending`` was recorded by the claim, and ``pending`` if still to be
        settled; None if the database refused the outcome (kept in short form)."""
        finish = None
        if pending is not None:
            finish = postgres.Finish(pending.run.pk, self.owner, pending.outcome_values())
        runs: list[JobRun] = []
        recorded = False
        frees = pending is not None and pending.frees_slot
        if frees or (limit and self.limited_waiting):
            try:
                runs, recorded = self._claim_limited(owner, now, limit, finish if frees else None)
            except UNSTORABLE as exc:
                if pending is None or not frees:
                    raise
                self.pending = refused(pending, exc)
                return None
            if pending is not None and frees:
                # Recorded (or refused) with the limited claim: settle it now, a later
                # statement may raise.
                faults.hit("outcome.after", using)
                self.settled = settle(pending, recorded, self.owner)
                log_outcome(pending.run, self.settled)
                pending = self.pending = None
        if runs and pending is not None:
            try:
                self.settled = record(pending, self.owner)
            except BaseException:
                # The runs just claimed would wait for their lease and lose an attempt:
                # give them back while the outcome stays pending.
                _give_back(runs, owner, now)
                raise
            pending = self.pending = None
            faults.hit("outcome.after", using)
        if not runs and (limit or pending is not None):
            looking = flow.has_limits()
            try:
                claimed = postgres.claim(
                    using,
                    owner,
                    now,
                    self.lease,
                    self.queues,
                    limit,
                    finish if pending is not None else None,
                    look_for_limited=looking,
                )
            except UNSTORABLE as exc:
                if pending is None:
                    raise
                self.pending = refused(pending, exc)  # written in short, with the next claim
                return None
            runs, recorded = claimed.runs, claimed.recorded
            self.limited_waiting = bool(claimed.limited_waiting)
            if not runs and limit and self.limited_waiting and pending is None:
                runs = self._claim_limited(owner, now, limit, None)[0]  # due since the last look
        return runs, recorded, pending

    def write(self, pending: Pending, now: datetime) -> Executed | None:
        """Write ``pending`` now, the way the worker does, without claiming another run
        (``execution.execute``, tests, ``InlineJobs``): on PostgreSQL in the claim's
        statement, with a claim of no run."""
        self.record_and_claim(pending, self.owner, now, limit=0)
        return self.settled

    def _claim_limited(
        self, owner: str, now: datetime, limit: int, finish: postgres.Finish | None
    ) -> tuple[list[JobRun], bool]:
        """Runs under a limit (PostgreSQL: with ``finish``, the outcome of a run that
        held a concurrency slot, in the same call); and whether ``finish`` was recorded."""
        if finish is None and (not limit or not flow.has_limits()):
            return [], False
        chosen = dialect.of(conf.database())
        assert isinstance(chosen, dialect.Postgres)  # only fused dialects come here
        return chosen.claim_limited_finishing(
            owner, now, self.lease, self.queues, limit, self.clock, finish
        )

    def flush(self) -> None:
        """Record the outcome still held (before the worker stops or idles); a database
        that stays away for a few seconds leaves the run to its lease."""
        pending, self.pending = self.pending, None
        if pending is not None:
            record_patiently(pending, self.owner)


def _give_back(runs: list[JobRun], owner: str, now: datetime) -> None:
    """Release ``runs`` claimed for ``owner`` (best effort: on a cut connection their
    lease decides)."""
    for run in runs:
        try:
            release(run, owner, now=now)
        except DatabaseError:
            log.warning("run %s: claimed, not executed, not given back (its lease will)", run.id)
            return
