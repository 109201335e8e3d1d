"""The worker loop: claim, lease, heartbeat, execute, suspend, retry, shut down.

Execution model: sync runs execute one at a time per process, in the main thread, so
that ``SIGALRM`` can stop a run past its ``timeout`` even inside an endless loop or a
blocking call. Async runs (``async def`` jobs) go to the process's async lane
(``lane.py``): up to ``--async-concurrency`` of them in flight on one event loop. The
main thread claims for both, several runs per round trip when the lane has room.
``--concurrency N`` forks N such processes under a supervisor (``supervisor.py``)
that forwards signals and replaces a child that died. A heartbeat thread renews the
leases of every run in hand; every write for a run is fenced by its lease.
"""

from __future__ import annotations

import logging
import threading
import time

from django.db import DatabaseError, connections

from .. import conf
from ..db import conflicts, faults
from ..db.claims import (
    let_go_expired_cancelled,
    record_starts,
    requeue_expired,
    start_needs_record,
)
from ..db.flow import holds
from ..db.flow import limits as flow
from ..db.leases import LeaseOwner
from ..engine.clock import Clock, current
from ..engine.timeouts import TimeGuard
from ..models import JobRun
from ..verbs.schedules import Ticker, sync
from ..verbs.waking import wake_late
from .batching import Batching
from .connections import close_broken_connections, fit_to_pool, keep_healthy
from .execution import run_to_stop
from .give_back import give_back_unbegun, give_back_unexecuted, release_afresh
from .heartbeat import Heartbeat
from .lane import AsyncLane
from .lane_size import is_async_run, lane_capacity, lane_threads
from .options import WorkerOptions as WorkerOptions  # where runjobs and the tests import it
from .outbox import Outbox
from .outcome import Pending
from .pauses import PauseWatch
from .presence import Presence
from .rollout import Rollout
from .stopping import StopNow, StopSignals
from .wakeup import Waker, make_waker, take_events

log = logging.getLogger("django_durable_jobs.worker")


class Worker(StopSignals):
    """One process's loop. ``run()`` returns the number of runs it executed."""

    options: WorkerOptions

    def __init__(self, options: WorkerOptions, *, clock: Clock | None = None) -> None:
        self.options = options
        # The database's clock (installed by the app): leases and wake times are
        # compared with times other processes wrote.
        self.clock = clock or current()
        self.lease = conf.required_duration("LEASE")
        self.heartbeat = conf.required_duration("HEARTBEAT")
        self.stopping = threading.Event()
        self.executed = 0
        self._in_hand: JobRun | None = None
        self._rollout = Rollout.of_this_process(self.lease)
        self._pauses = PauseWatch(options.poll_interval.total_seconds(), options.worker_id)
        self._outbox = Outbox(
            self.lease, options.queues, self.clock, self._rollout, pauses=self._pauses
        )
        self._signals = 0
        self._waker: Waker | None = None
        self._next_reap = 0.0
        self._beat: Heartbeat | None = None
        self._guard: TimeGuard | None = None
        self._lane: AsyncLane | None = None
        #: Sync runs claimed in a batch and not started yet (released if the worker stops).
        self._backlog: list[JobRun] = []
        #: How many runs the next claim may take (``batching``).
        self._batching = Batching()
        self._schedules = Ticker()
        self._presence: Presence | None = None

    # -- the loop --------------------------------------------------------------
    def run(self) -> int:
        capacity = lane_capacity(self.options.async_concurrency)
        # Before the first connection: Django's pool, if any, must hold the lane's too.
        threads = fit_to_pool(conf.database(), lane_threads(capacity))
        self._waker = make_waker()
        self._register()
        self._lane = self._make_lane(capacity, threads)
        # The schedules of the code this worker runs, before the start line: a worker
        # that said it started has its schedules' slots in the table.
        sync(self.clock.now())
        log.info(
            "worker %s: queues=%s concurrency=1 async=%s database=%s wake=%s lease=%ss",
            self.options.worker_id,
            ",".join(self.options.queues or ["*"]),
            self._lane.capacity if self._lane is not None else 0,
            connections[conf.database()].vendor,
            self._waker.mode,
            self.lease.total_seconds(),
        )
        try:
            while not self.stopping.is_set():
                if self.options.max_runs is not None and self.runs_done() >= self.options.max_runs:
                    break
                try:
                    worked = self.run_once()
                    keep_healthy(conf.database())
                except DatabaseError as exc:
                    close_broken_connections()
                    if conflicts.is_conflict(exc):  # another transaction first: again, at once
                        log.info("worker %s: %s; retrying", self._owner, conflicts.describe(exc))
                        self.stopping.wait(conflicts.pause())
                        continue
                    # A restarted database or a dropped connection: reconnect and carry on.
                    log.warning("worker %s: database error (%s); retrying", self._owner, exc)
                    self.stopping.wait(min(self.options.poll_interval.total_seconds(), 1.0))
                    continue
                if not worked and not self._idle():
                    break
        finally:
            self.flush()
            self._let_go()
            self._waker.close()
            if self._beat is not None:
                self._beat.stop()
            if self._presence is not None:
                self._presence.stopped(self.clock.now())
            connections.close_all()
        return self.runs_done()

    def _idle(self) -> bool:
        """Nothing was claimed: wait for work; False when a ``--burst`` worker is done
        (nothing runnable and no async run in flight that could make more)."""
        poll = self.options.poll_interval.total_seconds()
        lane = self._lane
        if lane is not None and lane.in_flight():
            if self.options.burst:
                lane.wait(poll, until_empty=True)
                return True
        elif self.options.burst:
            return False
        assert self._waker is not None
        if self._waker.mode != "polling":
            # Woken by a notification, the claim then finds the pauses read (at most a
            # poll ago): no read between the notification and the claim.
            self._pauses.current()
        if (heard := take_events(self._waker)) and wake_late(heard, self.clock.now()):
            # Runs that parked while these events' publishers were open (LISTEN, the
            # doorbell: the publishers leave this pass to the workers that hear of
            # their events). Heard in the last wait, looked at now: the claim the
            # events woke went first. It woke some: claim them now, not at the next
            # look (the doorbell's is up to 20 ms away).
            return True
        self._waker.wait(poll)
        return True

    def run_once(self) -> bool:
        """Reap expired leases when due, record the previous run's outcome, claim one run
        and execute it; False if there was nothing to do.

        The outcome of a run is written together with the next claim (one statement on
        PostgreSQL), so a busy worker pays one round trip per run.
        """
        now = self.clock.now()
        if time.monotonic() >= self._next_reap:
            self._next_reap = time.monotonic() + self.lease.total_seconds() / 4
            if requeued := requeue_expired(now=now):
                log.warning("requeued %d run(s) whose worker stopped renewing its lease", requeued)
            if let_go := let_go_expired_cancelled(now=now):
                log.warning("let go of %d cancelled run(s) whose worker died", let_go)
            if flow.has_limits() and (freed := holds.unhold_stranded(now=now, clock=self.clock)):
                log.warning("let %d held run(s) go whose key had free slots", freed)
        self._schedules.tick(now)  # start due schedule slots (cheap unless one is due)
        if self._backlog:  # a sync run of the last batch: no claim until it has started
            while not self._outbox.hold():  # the outcome in hand cannot wait for the claim
                self._outbox.record_and_claim(self._pending, self._owner, now, limit=0)
            self._execute(self._backlog.pop(0))
            return True
        lane = self._lane
        if lane is not None:
            overdue = ((waiting.run, waiting.owner) for waiting in lane.overdue(time.monotonic()))
            give_back_unbegun(
                overdue, self._beat, self.clock, "claimed ahead, not begun: no slot freed meanwhile"
            )
            if not lane.free():
                self.flush()  # the lane is full: record, claim nothing, wait for a slot
                lane.wait(self.options.poll_interval.total_seconds())
                return True
        pending = self._pending
        limit = self._next_batch(lane)
        # A batch's lease (``LeaseOwner.batch``) for runs that may wait before they begin:
        # several, or one claimed ahead of the lane's slots.
        batch = limit > 1 or (lane is not None and lane.would_wait(limit))
        owner = str(LeaseOwner.new(self.options.worker_id, batch=batch))
        if limit < 1:  # --max-runs: the async runs in hand are the last ones
            self.flush()
            if lane is not None:
                lane.wait(self.options.poll_interval.total_seconds(), until_empty=True)
            return True
        sent = time.monotonic()  # the leases it takes are made after this
        runs = self._outbox.record_and_claim(pending, owner, now, limit)
        self._dispatch(runs, owner, limit, sent)
        return bool(runs) or pending is not None

    def _dispatch(self, runs: list[JobRun], owner: str, limit: int, sent: float) -> None:
        """Hand async runs to the lane, execute the first sync run, keep the others.
        ``sent``: when the claim was sent (its leases are at most that old)."""
        lane = self._lane
        in_lane = {run.pk for run in runs if lane is not None and is_async_run(run)}
        # The starts of a batch's async runs are recorded as its sync runs' are
        # (``_begin``): by the heartbeat if they still run ``RECORD_STARTS_AFTER`` later
        # (``_hand_over``), and now for those whose last lease lapsed. A statement and a
        # commit here for every claim held the next claim up: with a thousand runs in
        # flight, that was most of the main thread's time.
        lapsed = [run.pk for run in runs if run.pk in in_lane and start_needs_record(run, owner)]
        if lapsed:
            record_starts(lapsed, owner)
        sync_runs = []
        for run in runs:
            if lane is not None and run.pk in in_lane:
                self._hand_over(lane, run, owner, sent)
            else:
                sync_runs.append(run)
        if len(runs) > 1:
            log.info("runs claimed: %d in one round trip (limit %d)", len(runs), limit)
        self._batching.claimed(len(runs), limit, sync=bool(sync_runs))
        if sync_runs:
            # Those that wait keep their attempt if the worker dies before they begin:
            # a batch's (``LeaseOwner.batch``, ``claims.requeue_expired``).
            first, waiting = sync_runs[0], sync_runs[1:]
            beat = self._heartbeat()
            for run in waiting:  # their leases are renewed until they start
                beat.hold(owner, run.id, since=sent)
            self._backlog.extend(waiting)
            self._execute(first, since=sent)

    def _hand_over(self, lane: AsyncLane, run: JobRun, owner: str, sent: float) -> None:
        """Start an async run in the lane; after a database error at once (the claim's
        connection cut), give it back without an attempt, as a sync run is."""
        beat = self._heartbeat()
        beat.hold(owner, run.id, since=sent)  # first: a freeze from here on is noticed
        try:
            faults.hit("claim.after", conf.database())
        except DatabaseError:
            beat.drop(run.id)
            give_back_unexecuted(run, self._owner, self.clock)
            return
        # A batch's start is recorded by the heartbeat if it still runs a while after
        # it began (``Heartbeat.begin``, called by the lane as it begins), or was
        # recorded by ``_dispatch``.
        lane.start(run, owner, begin=not start_needs_record(run, owner))

    def _next_batch(self, lane: AsyncLane | None) -> int:
        """How many runs the next claim may take (``batching``): the lane's free slots
        and what ``--max-runs`` leaves besides the runs in hand (0: none) bound it."""
        left = None
        if self.options.max_runs is not None:
            in_hand = lane.in_flight() if lane is not None else 0
            left = self.options.max_runs - self.runs_done() - in_hand
        return self._batching.next(free=lane.free() if lane is not None else None, left=left)

    def runs_done(self) -> int:
        """Runs executed to their next stop, sync and async."""
        return self.executed + (self._lane.executed if self._lane is not None else 0)

    def _make_lane(self, capacity: int, threads: int) -> AsyncLane | None:
        if not capacity:
            return None  # no async job here: the classic one-run loop, nothing more
        return AsyncLane(
            capacity=capacity,
            db_threads=threads,
            clock=self.clock,
            leases=self._heartbeat(),
        )

    def _let_go(self) -> None:
        """Stopping: release the sync runs never started, let the async ones finish
        (until the drain time-out, then cancel and release them)."""
        backlog, self._backlog = self._backlog, []
        kept = [(run, self._owner) for run in backlog]
        give_back_unbegun(kept, self._beat, self.clock, "claimed but not started")
        if self._lane is not None:
            ahead = [(waiting.run, waiting.owner) for waiting in self._lane.unstarted()]
            give_back_unbegun(
                ahead, self._beat, self.clock, "claimed ahead, not begun: the worker stops"
            )
            self._lane.drain(self.options.drain_timeout.total_seconds(), self._owner)

    def flush(self) -> None:
        """Record the outcome still held (before the worker stops or idles)."""
        self._outbox.flush()

    @property
    def _owner(self) -> str:
        """The lease owner of the runs in hand (``Outbox.owner``)."""
        return self._outbox.owner

    @property
    def _pending(self) -> Pending | None:
        return self._outbox.pending

    @_pending.setter
    def _pending(self, pending: Pending | None) -> None:
        self._outbox.pending = pending

    def _register(self) -> None:
        """The worker's row (admin, ``jobs workers``): inserted now, kept up to date by
        the heartbeat thread, which therefore starts with the loop."""
        self._presence = Presence(
            self.options.worker_id,
            queues=self.options.queues,
            concurrency=self.options.concurrency,
            lease=self.lease,
            executed=self.runs_done,
            jobs=self._rollout.jobs,
            heard=self._rollout.heard,
        )
        self._presence.register(self.clock.now())
        self._heartbeat()

    def _heartbeat(self) -> Heartbeat:
        if self._beat is None:
            self._beat = Heartbeat(self.clock, self.lease, self.heartbeat, self._presence)
            self._beat.start()
        return self._beat

    def _execute(self, run: JobRun, since: float | None = None) -> None:
        log.debug(
            "run claimed: run=%s job=%s attempt=%s from=%s",
            run.id,
            run.job_name,
            run.attempt,
            run.claimed_from,
        )
        self._in_hand, self._guard = run, TimeGuard()
        started = time.monotonic()
        beat = self._heartbeat()
        beat.hold(self._owner, run.id, since=since)
        try:
            faults.hit("claim.after", conf.database())
            self._begin(run, beat)
            self._pending = run_to_stop(
                run,
                clock=self.clock,
                owner=self._owner,
                guard=self._guard,
                interrupt=beat.interruption_for(run.id),
            )
        except StopNow:
            released = release_afresh(run, self._owner, self.clock)
            log.warning("run released: run=%s stopping at once (released=%s)", run.id, released)
            self.stopping.set()
            return
        except DatabaseError:
            # Outside the attempt (its first read, the engine's setup): nothing of the job
            # ran.
            give_back_unexecuted(run, self._owner, self.clock)
            raise
        finally:
            self._in_hand = self._guard = None
            beat.drop(run.id)
            if time.monotonic() - started > QUICK_RUN:
                self._batching.slow = True
        self.executed += 1

    def _begin(self, run: JobRun, beat: Heartbeat) -> None:
        """``run`` begins: its start is recorded by the heartbeat just after or, for a
        run whose last lease lapsed, now (``claims.start_needs_record``)."""
        if start_needs_record(run, self._owner):
            record_starts([run.pk], self._owner)
        else:
            beat.begin(run.id)


#: A sync run that takes longer (seconds) makes the next claim take one run.
QUICK_RUN = 0.02
