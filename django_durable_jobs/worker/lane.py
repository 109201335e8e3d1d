"""The async lane of a worker process: up to M ``async def`` runs in flight at once.

Sync runs keep the worker's main thread (one at a time, SIGALRM timeouts). Async runs
are handed to this lane: an event loop in a thread of its own, where each run is a
task. Their database work (claims are the main thread's) goes to a small pool of
``db_threads`` threads, each with its own connection; the sync step functions of
async jobs run on as many step threads of their own. Both are daemon threads
(``daemon_threads``): one that hangs does not keep the worker from exiting. The worker's
heartbeat renews the leases of every run in flight, and every write of a run is fenced
by its lease like a sync run's.

A run's slot is free once its job code stopped: its outcome then waits for the lane's
recorder (a few milliseconds, with other runs' outcomes in one commit) while the next
run begins; its lease is held until the outcome is recorded.

Claiming ahead: while slots free quickly, the lane takes a few runs more than it has
slots (``free``: as many as slots freed in the last ``AHEAD_WINDOW``, at most a tenth of
its capacity). They wait in the lane, their leases held, and each begins on the loop as
soon as a slot frees, without waiting for the claim's round trip (with 100 runs of
100 ms in flight, the claim's hand-over left 3-4 % of the slots idle). One that waits
``AHEAD_PATIENCE`` for a slot (the runs in flight became slow) is given back for another
worker to take (``overdue``), and the lane claims none ahead until a slot frees again.
Their claim is a batch's (``LeaseOwner.batch``): a run that never began keeps its
attempt if the worker dies.

Stopping: ``unstarted`` hands the runs claimed ahead back to the worker, which releases
them; ``drain`` waits for the runs in flight to finish (or suspend); ``abandon`` cancels
them, and each cancelled run is released without using an attempt.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import NamedTuple, Protocol, TypeVar
from uuid import UUID

from django.db import connections

from ..db.claims import release
from ..db.store import put_many
from ..engine.clock import Clock
from ..engine.core import Interrupt
from ..engine.records import RecordedStep, StepStore
from ..models import JobRun
from .connections import as_unit_of_work, on_connection
from .daemon_threads import DaemonThreads
from .execution import arun_to_stop
from .outcome import Pending
from .recording import record_all
from .write_batches import WriteBatches

log = logging.getLogger("django_durable_jobs.worker")
T = TypeVar("T")

#: Seconds a stopping worker waits for the database calls still running (``close``).
DB_PATIENCE = 10.0

#: Claiming ahead (``AsyncLane.free``): at most one run per ``AHEAD_SHARE`` slots, and
#: no more than the slots freed in the last ``AHEAD_WINDOW`` seconds; a run claimed
#: ahead that waited ``AHEAD_PATIENCE`` seconds for a slot is given back (``overdue``).
AHEAD_SHARE = 10
AHEAD_WINDOW = 0.02
AHEAD_PATIENCE = 1.0


class Leases(Protocol):
    """The part of the worker's heartbeat the lane uses."""

    def hold(self, owner: str, run_id: UUID, since: float | None = None) -> None: ...
    def begin(self, run_id: UUID) -> None: ...
    def drop(self, run_id: UUID) -> None: ...
    def interruption_for(self, run_id: UUID) -> Interrupt: ...


class Waiting(NamedTuple):
    """A run claimed ahead: handed to the lane, not begun."""

    run: JobRun
    owner: str
    #: Whether its start is the heartbeat's to record once it begins (``Heartbeat.begin``).
    begin: bool
    #: When it was handed over (monotonic).
    since: float


class AsyncLane:
    """Executes async runs on an event loop thread; the main thread hands them in."""

    def __init__(self, *, capacity: int, db_threads: int, clock: Clock, leases: Leases) -> None:
        self.capacity = capacity
        self.clock = clock
        self.leases = leases
        self.executed = 0
        #: Each thread closes its own connections as it ends (with Django's pool: gives
        #: them back). At close, a write still running (a run's outcome) gets
        #: ``DB_PATIENCE`` seconds to land; one waiting longer (for a lock held by
        #: someone's long transaction, a migration) is abandoned.
        self._db = DaemonThreads(
            db_threads,
            name="durable-jobs-db",
            on_exit=connections.close_all,
            patience=DB_PATIENCE,
            stuck="%d database call(s) still running (waiting for a lock?): "
            "abandoned when the worker exits",
        )
        #: Sync step functions run here, not on the database threads: one that hangs
        #: past its ``step_timeout`` (an HTTP call without a timeout) must not stop the
        #: lane from writing the records and outcomes of every other run, nor keep the
        #: process from exiting (daemon threads).
        self._calls = DaemonThreads(
            db_threads,
            name="durable-jobs-step",
            on_exit=connections.close_all,
            stuck="%d sync step function(s) still running past their step_timeout: "
            "abandoned when the worker exits",
        )
        self._loop = asyncio.new_event_loop()
        #: The runs begun, each a task of the loop.
        self._tasks: dict[UUID, asyncio.Task[None]] = {}
        #: Runs of ``_tasks`` whose job code stopped, their outcome not yet recorded:
        #: their slots are free.
        self._stopped: set[UUID] = set()
        #: Runs handed over, waiting for a slot (claimed ahead, or not begun by the loop
        #: yet), in the order they came.
        self._waiting: deque[Waiting] = deque()
        #: When the last slots were freed (monotonic): how many runs to claim ahead.
        self._freed: deque[float] = deque(maxlen=max(capacity // AHEAD_SHARE, 1))
        #: Set when the worker stops: no run begins from then on.
        self._closed = False
        #: Whether a ``_fill`` is already on its way to the loop: the runs of one claim
        #: wake the loop once (each wake-up is a write to its socket).
        self._filling = False
        self._changed = threading.Condition()
        #: Outcomes, and step records, written together as runs reach them.
        self._outcomes: WriteBatches[tuple[Pending, str]] = WriteBatches(
            self._loop, self._record_batch
        )
        self._steps: WriteBatches[tuple[StepStore, RecordedStep]] = WriteBatches(
            self._loop, self._put_batch
        )
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="durable-jobs-async", daemon=True
        )
        self._thread.start()

    # -- the main thread's side ------------------------------------------------
    def in_flight(self) -> int:
        """Runs in hand: waiting for a slot, executing, or stopped with their outcome
        not yet recorded."""
        begun, waiting = self.in_hand()
        return begun + waiting

    def in_hand(self) -> tuple[int, int]:
        """Of ``in_flight``: the runs begun (executing, or stopped with their outcome not
        yet recorded), and the runs claimed ahead still waiting for a slot."""
        with self._changed:
            return len(self._tasks), len(self._waiting)

    def free(self) -> int:
        """Runs to claim: a slot each whose run's job code stopped, and the runs to
        claim ahead, less those already waiting for a slot."""
        with self._changed:
            return max(self._room(time.monotonic()), 0)

    def would_wait(self, runs: int) -> bool:
        """Whether one of ``runs`` claimed now would wait for a slot (claimed ahead)."""
        with self._changed:
            return self._executing() + len(self._waiting) + runs > self.capacity

    def _room(self, now: float) -> int:
        return self.capacity + self._ahead(now) - self._executing() - len(self._waiting)

    def _ahead(self, now: float) -> int:
        """How many runs to claim ahead: the slots freed in the last ``AHEAD_WINDOW``
        (``_freed`` keeps the last few)."""
        recent = 0
        for freed in reversed(self._freed):
            if now - freed > AHEAD_WINDOW:
                break
            recent += 1
        return recent

    def _executing(self) -> int:
        return len(self._tasks) - len(self._stopped)

    def start(self, run: JobRun, owner: str, *, begin: bool = True) -> None:
        """Execute ``run`` (claimed by ``owner``) to its next stop and record it: at once
        if a slot is free, else when one frees. ``begin``: its start is the
        heartbeat's to record once it begins (``Heartbeat.begin``), as a batch's."""
        log.debug("run claimed: run=%s job=%s attempt=%s async", run.id, run.job_name, run.attempt)
        self.leases.hold(owner, run.id)
        with self._changed:
            # Counted at once: the next claim must see it in hand.
            self._waiting.append(Waiting(run, owner, begin, time.monotonic()))
            wake, self._filling = not self._filling, True
        if wake:
            self._loop.call_soon_threadsafe(self._fill)

    def wait(self, seconds: float, *, until_empty: bool = False) -> bool:
        """Wait until there is room for a run to claim (or every run finished); False on
        time-out. While runs claimed ahead wait, at most ``AHEAD_PATIENCE``: the worker
        then gives back those that waited too long (``overdue``)."""
        with self._changed:
            if self._waiting and not until_empty:
                seconds = min(seconds, AHEAD_PATIENCE)
            return self._changed.wait_for(
                lambda: (
                    not (self._tasks or self._waiting)
                    if until_empty
                    else self._room(time.monotonic()) > 0
                ),
                timeout=seconds,
            )

    def overdue(self, now: float) -> list[Waiting]:
        """The runs claimed ahead that waited ``AHEAD_PATIENCE`` or more for a slot
        (``now``: monotonic), taken out of the lane for the worker to give back: the
        runs in flight became slow, and another worker may have room. None is claimed
        ahead again until a slot frees."""
        with self._changed:
            late: list[Waiting] = []
            while self._waiting and now - self._waiting[0].since >= AHEAD_PATIENCE:
                late.append(self._waiting.popleft())
            if late:
                self._freed.clear()
                self._changed.notify_all()
            return late

    def unstarted(self) -> list[Waiting]:
        """Stopping: the runs that never began, taken out of the lane for the worker to
        give back; from now on no run begins."""
        with self._changed:
            self._closed = True
            waiting, self._waiting = list(self._waiting), deque()
            self._changed.notify_all()
            return waiting

    #: How long a stopping worker waits for the runs it abandoned to be given back:
    #: each is a short write, but on a busy machine more than the drain time-out.
    RELEASE_PATIENCE = 10.0

    def abandon(self) -> None:
        """Cancel every run in flight; each is released without using an attempt. No
        run waiting for a slot begins (``unstarted`` gives them back)."""
        with self._changed:
            self._closed = True
        self._loop.call_soon_threadsafe(self._cancel_all)

    def drain(self, seconds: float, owner: str) -> None:
        """Stopping: let the runs in flight finish for ``seconds``, then cancel them
        (each is given back, or let go if it was cancelled: a write each, waited for up
        to ``RELEASE_PATIENCE``), and close."""
        if self.in_flight():
            log.info("worker %s: waiting for %d async run(s)", owner, self.in_flight())
        if self.wait(seconds, until_empty=True):
            self.close()
            return
        self.abandon()
        released = self.wait(max(seconds, self.RELEASE_PATIENCE), until_empty=True)
        # A release that did not land in that time waits on a database call that does
        # not return (a lock held by someone's long transaction, a migration): that call
        # has had its patience, so the worker exits now instead of DB_PATIENCE later.
        self.close(db_patience=None if released else 0.0)

    def close(self, db_patience: float | None = None) -> None:
        """Stop the loop and the lane's threads; database calls still running get
        ``db_patience`` seconds (default ``DB_PATIENCE``) to return."""
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=5)
        # Each thread closes its connections as it ends; one whose call still runs (a
        # query waiting for a lock, a step function hung past its timeout) is not
        # waited for.
        self._db.shutdown(wait=True, patience=db_patience)
        self._calls.shutdown(wait=True)

    # -- the loop's side -------------------------------------------------------
    async def io(self, work: Callable[[], T]) -> T:
        """Database work (and sync step functions) on the lane's connection threads."""
        return await self._loop.run_in_executor(self._db, on_connection, work)

    async def call(self, work: Callable[[], T]) -> T:
        """A sync step function, on the lane's step threads (``_calls``)."""
        return await self._loop.run_in_executor(self._calls, as_unit_of_work, work)

    def put(self, store: StepStore, record: RecordedStep) -> asyncio.Future[None]:
        """Write a step record: the future is done once it is stored (or refused). The
        records that runs reach while the writer is busy are written together in its
        next statement (``put_many``): with 100 runs in flight, a commit each made every
        one wait for the others' disk flushes. A future, not a coroutine: the step
        awaits it without a task of its own (``AsyncSteps._do``)."""
        return self._steps.add((store, record))

    async def _put_batch(
        self, items: list[tuple[StepStore, RecordedStep]]
    ) -> list[Exception | None]:
        try:
            return await self.io(functools.partial(put_many, items))
        except Exception as exc:  # the connection, say: no record of the batch landed
            return [exc] * len(items)

    async def _record(self, pending: Pending, owner: str) -> None:
        """Record ``pending``; the outcomes of runs that stop while the recorder is busy
        are written together with its next transaction (``record_all``)."""
        # The outcome is written even if this run is cancelled.
        await asyncio.shield(self._outcomes.add((pending, owner)))

    async def _record_batch(self, outcomes: list[tuple[Pending, str]]) -> list[Exception | None]:
        try:
            await self.io(functools.partial(record_all, outcomes))
        except Exception:  # the lease decides: a run not recorded is taken over
            log.exception("run outcomes: the recorder failed (%d runs)", len(outcomes))
        return [None] * len(outcomes)

    def _fill(self) -> None:
        """Begin the runs waiting, in their order, while a slot is free (on the loop:
        a run claimed ahead begins as soon as a run in flight stops)."""
        with self._changed:
            self._filling = False
            begun: list[Waiting] = []
            while self._waiting and not self._closed and self._executing() < self.capacity:
                waiting = self._waiting.popleft()
                run = waiting.run
                self._tasks[run.id] = self._loop.create_task(
                    self._execute(run, waiting.owner), name=f"run {run.id}"
                )
                begun.append(waiting)
        for waiting in begun:
            if waiting.begin:
                self.leases.begin(waiting.run.id)

    def _cancel_all(self) -> None:
        """Cancel the runs still executing; those that stopped keep waiting for their
        outcome's write (released now, they would execute again)."""
        with self._changed:
            tasks = [task for run_id, task in self._tasks.items() if run_id not in self._stopped]
        for task in tasks:
            # Once: a second stop (the drain's time-out and the supervisor's signal come
            # together) must not cancel the release the first one started; the lane
            # cancels its tasks here only.
            if not task.cancelling():
                task.cancel()

    async def _execute(self, run: JobRun, owner: str) -> None:
        try:
            pending = await arun_to_stop(
                run,
                clock=self.clock,
                owner=owner,
                interrupt=self.leases.interruption_for(run.id),
                io=self.io,
                put=self.put,
                call=self.call,
            )
            with self._changed:  # its slot is free: the next run need not wait for this
                self._stopped.add(run.id)
                self._freed.append(time.monotonic())
                self._changed.notify_all()
            self._fill()
            await self._record(pending, owner)
            self.executed += 1
        except asyncio.CancelledError:
            released = await self.io(lambda: release(run, owner, now=self.clock.now()))
            log.warning("run released: run=%s stopping at once (released=%s)", run.id, released)
        except Exception:  # never reached by job code (its failures are outcomes)
            log.exception("run %s: the async lane could not execute it", run.id)
        finally:
            self.leases.drop(run.id)
            with self._changed:
                self._tasks.pop(run.id, None)
                freed = run.id not in self._stopped  # else freed when it stopped
                self._stopped.discard(run.id)
                self._changed.notify_all()
            if freed:
                self._fill()
