"""The outcome a worker holds between two claims, and the one place it is written
with the next claim: on PostgreSQL in the claim's own statement (one round trip per
run), elsewhere just before it.

The outcome is written under the lease owner that holds the run (``Outbox.owner``),
which becomes the next claim's owner only once the claim ran: if the statement
raises, the outcome stays here, under the owner whose lease still covers it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from django.db import DatabaseError

from .. import conf
from ..db import dialect, faults
from ..db.claims import claim, release
from ..db.executable import Executable
from ..db.flow import limits as flow
from ..db.paused import Paused
from ..db.postgresql import claims as postgres
from ..db.postgresql import flow as postgres_flow
from ..db.probe import any_due
from ..engine.clock import Clock
from ..models import JobRun
from .outcome import UNSTORABLE, Executed, Pending, batchable, finish_of
from .pauses import PauseWatch
from .recording import record, record_all, record_together, refused, settle_all
from .rollout import Rollout

log = logging.getLogger("django_durable_jobs.worker")


class Outbox:
    """One worker process's unwritten outcomes and the lease owner they are fenced by."""

    def __init__(
        self,
        lease: timedelta,
        queues: Sequence[str] | None,
        clock: Clock,
        rollout: Rollout | None = None,
        pauses: PauseWatch | None = None,
    ) -> None:
        self.lease = lease
        self.queues = None if queues is None else list(queues)
        self.clock = clock
        #: The worker's view of a rolling deploy: its claim's filter, and the runs of
        #: jobs and versions it lacks, given back to others (None: no worker, no filter).
        self.rollout = rollout
        #: The worker's view of the pauses (None: no worker, none honoured).
        self.pauses = pauses
        self.owner = ""
        #: The outcome of the run executed last, not written yet.
        self.pending: Pending | None = None
        #: Earlier outcomes of the same batch, held to be written with ``pending`` in
        #: one call (``batchable`` outcomes only, and not for long: see ``hold``).
        self.held: list[Pending] = []
        self._held_since = 0.0
        #: What the last outcome written came to (None: not written, or none yet).
        self.settled: Executed | None = None
        #: PostgreSQL: whether the last claim saw runs under a limit due (the next one
        #: then asks the flow claim first); True until a claim said otherwise.
        self.limited_waiting = True
        #: Where idle workers poll: whether the last claim took nothing (the next asks
        #: ``probe.any_due`` first).
        self.idle = False

    def hold(self) -> bool:
        """Keep ``pending`` unwritten while the worker starts the next run of its batch,
        to write it with the batch's next claim (one statement and one commit for the
        batch's outcomes instead of one per run); False if it must be written first:
        it enqueues a handler, or frees a concurrency slot where that takes a
        transaction of its own (``batchable``), too many are held, or the first was
        held ``HOLD_FOR`` ago (the runs have stopped being quick: the outcomes are not
        kept from their watchers, nor the slots from the held runs)."""
        pending = self.pending
        if pending is None:
            return True
        if not batchable(pending, self._fused_db()) or len(self.held) >= MAX_HELD:
            return False
        if self.held and time.monotonic() - self._held_since > HOLD_FOR:
            return False
        if not self.held:
            self._held_since = time.monotonic()
        self.held.append(pending)
        self.pending = None
        return True

    def _fused_db(self) -> bool:
        return dialect.of(conf.database()).fused

    def record_and_claim(
        self, pending: Pending | None, owner: str, now: datetime, limit: int = 1
    ) -> list[JobRun]:
        """Record ``pending`` and the outcomes held before it (fenced by ``self.owner``,
        whose lease they hold) and claim for ``owner``. ``self.owner`` only becomes
        ``owner`` once the statement ran: if it raises, the outcomes stay unwritten
        under the owner that still holds their lease.

        Runs under a flow-control limit are claimed first (``flow.claim_limited`` locks
        their key); on PostgreSQL the outcomes of runs that held a concurrency slot
        are written by that call, other outcomes by the claim's statement, and one
        that starts an ``on_failure`` handler on its own (``Pending.fused``)."""
        using = conf.database()
        self.settled = None
        self._paused(limit)  # read once a poll, idle or not: its log lines say it was seen
        pendings = [*self.held, *([pending] if pending is not None else [])]
        if pendings:
            faults.hit("outcome.before", using)
        fused = dialect.of(using).fused
        if len(pendings) > 1 and not batchable(pendings[-1], fused):  # the held first, together
            self._record_apart(pendings[:-1])
            pendings = pendings[-1:]
        if pendings and not (fused and all(p.fused for p in pendings)):
            self._record_apart(pendings)
            pendings = []
            faults.hit("outcome.after", using)
        if fused:
            fused_outcome = self._fused(pendings, owner, now, limit, using)
            if fused_outcome is None:
                return []  # an outcome was refused: written in short (next time)
            runs, recorded, pendings = fused_outcome
        elif limit == 0:  # only the outcomes (``execution.execute``)
            runs, recorded = [], frozenset()
        elif self.idle and not any_due(using, now, self.queues, self._paused()):
            runs = []  # a poll that found nothing due: no claim to build (``probe``)
        else:
            runs = claim(
                owner,
                now=now,
                lease=self.lease,
                queues=self.queues,
                clock=self.clock,
                limit=limit,
                only=self._only(now),
                paused=self._paused(),
            )
            self.idle = not runs
            recorded = frozenset()  # no outcome here: recorded on their own above
        previous, self.owner, self.pending, self.held = self.owner, owner, None, []
        if pendings:
            faults.hit("outcome.after", using)
        written = [(p, previous) for p in pendings]
        for executed in settle_all(written, [p.run.pk in recorded for p in pendings]):
            self.settled = executed
        if runs and self.rollout is not None:  # runs of jobs or versions it lacks: to others
            runs = self.rollout.executable(runs, owner, now)
        return runs

    def _only(self, now: datetime) -> Executable | None:
        """The claim's filter: the jobs and versions this worker may take (``rollout``)."""
        return None if self.rollout is None else self.rollout.only(now)

    def _paused(self, limit: int = 1) -> Paused | None:
        """The claim's other filter: the queues and jobs paused (``pauses``); none for a
        claim of no run (outcomes only)."""
        return None if self.pauses is None or not limit else self.pauses.current()

    def _record_apart(self, pendings: list[Pending]) -> None:
        """Record ``pendings`` with statements of their own (not the claim's): in one
        transaction, or one by one if the database refuses one (in short then)."""
        if len(pendings) == 1:
            self.settled = record(pendings[0], self.owner)
        else:
            self.settled = record_together(pendings, self.owner)
        self.held = [p for p in self.held if not any(p is q for q in pendings)]
        if any(self.pending is q for q in pendings):
            self.pending = None

    def _fused(
        self, pendings: list[Pending], owner: str, now: datetime, limit: int, using: str
    ) -> tuple[list[JobRun], frozenset[Any], list[Pending]] | None:
        """PostgreSQL: claim (and record ``pendings``) in as few calls as can be. Runs
        under a limit are asked for when the last claim saw some due
        (``limited_waiting``) or outcomes free concurrency slots (that call records
        them, all in one); otherwise one statement claims and records the rest.
        Returns the runs, the ids of the runs the claim recorded, and the outcomes
        still to be settled; None if the database refused an outcome (then kept in
        short form, or each recorded on its own)."""
        limited = [p for p in pendings if p.frees_slot]
        pendings = [p for p in pendings if not p.frees_slot]
        runs: list[JobRun] = []
        recorded: frozenset[Any] = frozenset()
        if limited or (limit and self.limited_waiting):
            try:
                runs, done = self._claim_limited(owner, now, limit, self._finishes(limited))
            except UNSTORABLE:
                if not limited:
                    raise
                self._record_apart(limited)  # which one? each on its own, in short if need be
                return None
            if limited:
                # Recorded (or refused) with the limited claim: settle them now, a
                # later statement may raise.
                faults.hit("outcome.after", using)
                self._settle(limited, done)
        if runs and pendings:
            try:
                self._record_apart(pendings)
            except BaseException:
                # The runs just claimed would wait for their lease and lose an attempt:
                # give them back while the outcomes stay unwritten.
                _give_back(runs, owner, now)
                raise
            pendings = []
            faults.hit("outcome.after", using)
        if not runs and (limit or pendings):
            looking = flow.has_limits()
            try:
                claimed = postgres.claim(
                    using,
                    owner,
                    now,
                    self.lease,
                    self.queues,
                    limit,
                    self._finishes(pendings),
                    look_for_limited=looking,
                    only=self._only(now),
                    paused=self._paused(limit),
                )
            except UNSTORABLE as exc:
                if not pendings:
                    raise
                if len(pendings) == 1:  # written in short, with the next claim
                    self.held = [p for p in self.held if p is not pendings[0]]
                    self.pending = refused(pendings[0], exc)
                else:  # which one? each on its own, in short if need be
                    self._record_apart(pendings)
                return None
            runs, recorded = claimed.runs, claimed.recorded
            self.limited_waiting = bool(claimed.limited_waiting)
            if not runs and limit and self.limited_waiting and not pendings:
                runs = self._claim_limited(owner, now, limit, ())[0]  # due since the last look
        return runs, recorded, pendings

    def _finishes(self, pendings: list[Pending]) -> list[postgres.Finish]:
        return [finish_of(p, self.owner) for p in pendings]

    def _settle(self, pendings: list[Pending], recorded: frozenset[Any]) -> None:
        """Settle ``pendings``, written (or refused: not in ``recorded``) under
        ``self.owner``, and let go of them."""
        written = [(p, self.owner) for p in pendings]
        for executed in settle_all(written, [p.run.pk in recorded for p in pendings]):
            self.settled = executed
        self.held = [p for p in self.held if not any(p is q for q in pendings)]
        if any(self.pending is q for q in pendings):
            self.pending = None

    def write(self, pending: Pending, now: datetime) -> Executed | None:
        """Write ``pending`` now, the way the worker does, without claiming another run
        (``execution.execute``, tests, ``InlineJobs``): on PostgreSQL in the claim's
        statement, with a claim of no run."""
        self.record_and_claim(pending, self.owner, now, limit=0)
        return self.settled

    def _claim_limited(
        self, owner: str, now: datetime, limit: int, finishes: list[postgres.Finish] | tuple[()]
    ) -> tuple[list[JobRun], frozenset[Any]]:
        """Runs under a limit (PostgreSQL: with ``finishes``, the outcomes of runs that
        held a concurrency slot, in the same call); and the ids of those recorded."""
        if not finishes and (not limit or not flow.has_limits()):
            return [], frozenset()
        if not limit:  # only the outcomes: no candidates to read
            return [], postgres_flow.finish_concurrency(conf.database(), finishes, now)
        return flow.claim_limited(
            owner,
            now=now,
            lease=self.lease,
            queues=self.queues,
            limit=limit,
            clock=self.clock,
            finishes=finishes,
            only=self._only(now),
            paused=self._paused(),
        )

    def flush(self) -> None:
        """Record the outcomes still held (before the worker stops or idles); a database
        that stays away for a few seconds leaves the runs to their lease."""
        pendings = [*self.held, *([self.pending] if self.pending is not None else [])]
        self.pending, self.held = None, []
        if pendings:
            record_all([(pending, self.owner) for pending in pendings])


#: The most outcomes held for one statement, and for how long (seconds) the first
#: of them may wait: a batch of quick runs shares one commit, a slow one does not.
MAX_HELD = 50
HOLD_FOR = 0.01


def _give_back(runs: list[JobRun], owner: str, now: datetime) -> None:
    """Release ``runs`` claimed for ``owner`` (best effort: on a cut connection their
    lease decides)."""
    for run in runs:
        try:
            release(run, owner, now=now)
        except DatabaseError:
            log.warning("run %s: claimed, not executed, not given back (its lease will)", run.id)
            return
