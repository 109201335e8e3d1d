"""The heartbeat of a worker process: one thread, on its own connection, that renews
the leases of every run in hand, records the start of a batch's runs, and notices
runs cancelled meanwhile."""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Iterable
from datetime import timedelta
from uuid import UUID

from django.db import DatabaseError, connections

from .. import conf
from ..db import faults
from ..db.claims import renew, renew_held
from ..db.leases import LeaseOwner
from ..db.store import LeaseLost
from ..engine.clock import Clock
from ..engine.core import Interrupt, Io
from ..exceptions import RunCancelled
from ..models import JobRun, RunStatus
from .presence import Presence

log = logging.getLogger("django_durable_jobs.worker")


#: Seconds a batch's run runs before its start is recorded (``Heartbeat.begin``): a
#: quick run ends first and costs no write; a longer one's is recorded within twice
#: that, with the others that began meanwhile, in one statement. At 20 ms, the thread
#: woke 50 times a second while an async lane began runs, and a worker's memory grew
#: by 20-35 MB over 20,000 async no-op runs (benchmarks/README.md, "Worker
#: memory").
RECORD_STARTS_AFTER = 0.2

#: Seconds ``Heartbeat.stop`` waits for a beat in progress to end (a database that does
#: not answer is given up on: the thread is a daemon).
STOP_WAIT = 5.0


class Heartbeat(threading.Thread):
    """One per worker process, on its own connection: renews the leases of the runs in
    hand (the sync one and every async one in flight) every ``every``, in one statement
    for all of them, records the start of a batch's sync runs that run longer than
    ``RECORD_STARTS_AFTER``, and notices a cancellation so the run stops at its next
    step."""

    def __init__(
        self, clock: Clock, lease: timedelta, every: timedelta, presence: Presence | None = None
    ) -> None:
        super().__init__(name="durable-jobs-heartbeat", daemon=True)
        self.clock, self.lease, self.every = clock, lease, every.total_seconds()
        self.presence = presence
        self._lock = threading.Lock()
        self._held: dict[UUID, str] = {}  # run id -> the owner that holds its lease
        self._cancelled: set[UUID] = set()
        self._renewed: dict[UUID, float] = {}  # run id -> monotonic time of claim or renewal
        #: Runs of a batch that began, their start not recorded yet (``begin``): run id
        #: -> monotonic time it began; whether the thread looks at them every
        #: ``RECORD_STARTS_AFTER``, and whether one began since it last looked.
        self._begun: dict[UUID, float] = {}
        self._watching = self._new_starts = False
        self._starts = threading.Event()  # set by ``begin``: wakes the thread
        self._done = threading.Event()

    def hold(self, owner: str, run_id: UUID, since: float | None = None) -> None:
        """Renew ``run_id``'s lease (``owner``'s) from now on. ``since``: the monotonic
        time its lease was last made, when not now (the claim was sent then); holding
        a run again keeps that time, so that a process frozen in between is noticed."""
        with self._lock:
            if self._held.get(run_id) != owner:
                self._renewed[run_id] = time.monotonic() if since is None else since
            self._held[run_id] = owner
            self._cancelled.discard(run_id)

    def begin(self, run_id: UUID) -> None:
        """``run_id`` (held) begins. If its claim was a batch's (``LeaseOwner.batch``),
        the thread records that if it still runs ``RECORD_STARTS_AFTER`` later
        (``record_starts``): from then on a lapse of its lease counts its attempt
        (``claims.requeue_expired``)."""
        with self._lock:
            owner = self._held.get(run_id)
            if owner is None or not LeaseOwner.of_batch(owner):
                return
            self._begun[run_id] = time.monotonic()
            self._new_starts = True
            wake = not self._watching  # else it looks soon: no wake-up per run
        if wake:
            self._starts.set()

    def drop(self, run_id: UUID) -> None:
        with self._lock:
            self._held.pop(run_id, None)
            self._renewed.pop(run_id, None)
            self._begun.pop(run_id, None)

    def interruption_for(self, run_id: UUID) -> Interrupt:
        """What the engine of ``run_id`` asks before each step, sync or async: a
        cancellation, or, when its lease was not renewed for a whole lease, the
        database's word on whether this worker still holds it."""
        return lambda: self._interruption(run_id) or self._stale(run_id)

    def _stale(self, run_id: UUID) -> Io | None:
        """Not renewed for a whole lease (SIGSTOP, a VM pause): another worker may own
        the run now. Ask before the next step's side effect, not after it: an ``Io``,
        so that an async run asks off its event loop."""
        with self._lock:
            owner, renewed = self._held.get(run_id), self._renewed.get(run_id)
        if owner is None or renewed is None:
            return None
        if time.monotonic() - renewed < self.lease.total_seconds():
            return None
        return Io(functools.partial(self._still_held, owner, run_id), write=True)

    def _still_held(self, owner: str, run_id: UUID) -> LeaseLost | None:
        if renew(owner, [run_id], now=self.clock.now(), lease=self.lease):
            with self._lock:
                self._renewed[run_id] = time.monotonic()
            return None
        return LeaseLost(
            f"run {run_id}: worker {owner} was not renewed for a whole lease and lost it; "
            "the next step is not started"
        )

    def _interruption(self, run_id: UUID) -> BaseException | None:
        if run_id not in self._cancelled:
            return None
        return RunCancelled("the run was cancelled while it executed")

    def run(self) -> None:
        due = time.monotonic() + self.every
        try:
            while not self._done.is_set():
                self._wait(due)
                if self._done.is_set():
                    break
                try:
                    if time.monotonic() >= due:
                        due = time.monotonic() + self.every
                        self.beat()
                    else:
                        self.record_starts()
                except DatabaseError as exc:
                    log.warning("heartbeat failed (%s); reconnecting", exc)
                    connections.close_all()
        finally:
            connections.close_all()

    def _wait(self, due: float) -> None:
        """Until the next beat (``due``, monotonic), or the next look at the starts to
        record: every ``RECORD_STARTS_AFTER`` while runs of a batch begin (``begin``),
        until a look finds none begun since the last."""
        with self._lock:
            self._watching = bool(self._begun) or self._new_starts
            self._new_starts = False
        timeout = due - time.monotonic()
        if self._watching:
            timeout = min(timeout, RECORD_STARTS_AFTER)
        self._starts.wait(max(timeout, 0.0))
        self._starts.clear()

    def beat(self) -> None:
        """One beat: renew every lease in hand (recording the starts not recorded yet),
        then the worker's row."""
        with self._lock:
            held, started = dict(self._held), set(self._begun)
        if held:
            self._recorded(self._renew(held, started) & started)
        if self.presence is not None:
            self.presence.beat(self.clock.now())

    def record_starts(self) -> None:
        """Record the start of the batch's runs that began ``RECORD_STARTS_AFTER`` ago
        or more (``begin``), in one statement that renews their leases too
        (``renew_held``); a run it does not renew is looked up (``_renew``), and its
        start recorded by a later look or beat."""
        ripe = time.monotonic() - RECORD_STARTS_AFTER
        with self._lock:
            held = {run_id: self._held[run_id] for run_id, t in self._begun.items() if t <= ripe}
        if held:
            self._recorded(self._renew(held, set(held)))

    def _recorded(self, run_ids: Iterable[UUID]) -> None:
        with self._lock:
            for run_id in run_ids:
                self._begun.pop(run_id, None)

    def _beat(self, owner: str, *run_ids: UUID) -> None:
        """Renew ``run_ids``, all held by ``owner``."""
        self._renew(dict.fromkeys(run_ids, owner))

    def _renew(self, held: dict[UUID, str], started: set[UUID] | None = None) -> set[UUID]:
        """Renew every lease in ``held`` (run id -> owner) in one statement, recording
        the start of the runs ``started``, then look up the runs it did not renew:
        cancelled, taken over, or left because another transaction held their row
        (``renew_held``'s ``skip_locked``; renewed by the next beat). Returns the ids
        renewed."""
        faults.hit("heartbeat", conf.database())
        now = self.clock.now()
        until = now + self.lease
        renewed = renew_held(
            held, now=now, lease=self.lease, started=started or (), skip_locked=True
        )
        with self._lock:
            if renewed == len(held):
                self._renewed.update(dict.fromkeys(held, time.monotonic()))
                return set(held)
            # Not those whose outcome was recorded meanwhile (dropped): with many runs
            # in flight most of the runs not renewed are these, and a look at each cost
            # more than the renewal.
            unsure = [run_id for run_id, owner in held.items() if self._held.get(run_id) == owner]
        rows = (
            JobRun.objects.using(conf.database())
            .filter(pk__in=unsure)
            # Renewed just now (running, ours, the lease it wrote): nothing to learn.
            .exclude(
                lease_expires_at=until,
                status=RunStatus.RUNNING,
                lease_owner__in=set(held.values()),
            )
            .values_list("pk", "status", "lease_owner")
        )
        cancelled: dict[UUID, str] = {}
        left: set[UUID] = set()
        for run_id, status, lease_owner in rows:
            left.add(run_id)
            if lease_owner == held[run_id] and status == RunStatus.RUNNING:
                continue  # another transaction held its row: the next beat renews it
            with self._lock:
                if self._held.get(run_id) != held[run_id]:
                    continue  # the run finished meanwhile
                if status == RunStatus.CANCELLED:
                    self._cancelled.add(run_id)
                    if lease_owner == held[run_id]:
                        cancelled[run_id] = lease_owner
                elif status in {RunStatus.RUNNING, RunStatus.QUEUED}:  # taken over
                    log.warning("run %s: lease lost (status %s)", run_id, status)
                # else its outcome was recorded just now, before it was dropped
        ours = set(unsure) - left
        with self._lock:
            renewed_at = time.monotonic()
            for run_id in ours:
                if run_id in self._held:
                    self._renewed[run_id] = renewed_at
        if cancelled:
            self._renew_cancelled(cancelled)
        return ours

    def _renew_cancelled(self, held: dict[UUID, str]) -> None:
        """Renew the leases of runs cancelled in this worker's hand: it executes each up
        to its next step (a step in flight finishes and is recorded), then lets go of
        it. Expired, such a lease says the worker died, and a reap lets go of the run
        (``claims.let_go_expired_cancelled``); left to expire here, a step longer than
        a lease would lose its run to the reap, and its record would be refused."""
        renew_held(
            held,
            now=self.clock.now(),
            lease=self.lease,
            status=RunStatus.CANCELLED,
            skip_locked=True,
        )
        with self._lock:
            for run_id, owner in held.items():
                if self._held.get(run_id) == owner:
                    self._renewed[run_id] = time.monotonic()

    def stop(self, wait: float = STOP_WAIT) -> None:
        """Stop beating and wait up to ``wait`` seconds for the thread to end, which
        closes its connection: a worker that stops leaves no session behind it."""
        self._done.set()
        self._starts.set()
        if self.is_alive() and threading.current_thread() is not self:
            self.join(wait)
