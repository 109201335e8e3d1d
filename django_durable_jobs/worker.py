"""The worker loop: claim, lease, heartbeat, execute, suspend, retry, shut down.

Execution model: one run at a time per process, in the main thread, so that
``SIGALRM`` can stop a run past its ``timeout`` even inside an endless loop or a
blocking call. ``--concurrency N`` forks N such processes under a supervisor that
forwards signals and replaces a child that died. A heartbeat thread renews the
lease of the run in hand; every write for a run is fenced by that lease.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import socket
import threading
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from types import FrameType
from uuid import UUID

from django.db import DatabaseError, connections

from . import claims_pg, conf, faults, flow
from .claims import claim, release, renew, requeue_expired
from .clock import Clock, current
from .exceptions import RunCancelled
from .execution import UNSTORABLE, Pending, run_to_stop, settle
from .health import close_broken_connections, keep_healthy
from .models import JobRun, RunStatus
from .orphans import stop_with_parent
from .recording import log_outcome, record, record_patiently, refused
from .schedules import Ticker, sync
from .store import LeaseLost
from .timeouts import TimeGuard
from .wakeup import Waker, make_waker
from .workers import Presence

log = logging.getLogger("django_durable_jobs.worker")


class StopNow(BaseException):
    """Raised in the main thread by a second stop signal: abandon the run in hand."""


@dataclass(frozen=True, kw_only=True)
class WorkerOptions:
    queues: Sequence[str] | None = None
    concurrency: int = 1
    burst: bool = False
    max_runs: int | None = None
    poll_interval: timedelta = timedelta(seconds=1)
    worker_id: str = field(default_factory=lambda: f"{socket.gethostname()}:{os.getpid()}")
    drain_timeout: timedelta = timedelta(seconds=30)


class Worker:
    """One process's loop. ``run()`` returns the number of runs it executed."""

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
        self._owner = ""
        self._signals = 0
        self._waker: Waker | None = None
        self._next_reap = 0.0
        self._beat: _Heartbeat | None = None
        self._pending: Pending | None = None
        self._guard: TimeGuard | None = None
        self._schedules = Ticker()
        self._presence: Presence | None = None

    # -- signals ---------------------------------------------------------------
    # SIGTERM/SIGINT: the first drains, the second abandons the run in hand. A
    # supervisor forwards SIGUSR1 (drain) and SIGUSR2 (abandon) instead, so a child
    # that also got the signal directly (Ctrl-C reaches the whole process group,
    # systemd signals the whole cgroup) does not count one stop request twice.
    def install_signal_handlers(self) -> None:
        signal.signal(signal.SIGTERM, self._on_signal)
        signal.signal(signal.SIGINT, self._on_signal)
        signal.signal(signal.SIGUSR1, self._on_drain)
        signal.signal(signal.SIGUSR2, self._on_abandon)

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self._signals += 1
        if self._signals == 1:
            self._drain(signal.Signals(signum).name)
        else:
            self._abandon()

    def _on_drain(self, signum: int, frame: FrameType | None) -> None:
        self._drain("SIGUSR1 from the supervisor")

    def _on_abandon(self, signum: int, frame: FrameType | None) -> None:
        if not self.stopping.is_set():
            log.warning(
                "worker %s: stopping at once (SIGUSR2: a second stop, or the supervisor is "
                "gone): giving back the run in hand",
                self.options.worker_id,
            )
        self._abandon()

    def _drain(self, why: str) -> None:
        if self.stopping.is_set():
            return
        doing = "finishing the run in hand" if self._in_hand is not None else "idle, exiting"
        log.info("worker %s: stopping (%s): %s", self.options.worker_id, why, doing)
        self.stop()
        drain = self.options.drain_timeout.total_seconds()
        timer = threading.Timer(drain, os.kill, (os.getpid(), signal.SIGUSR2))
        timer.daemon = True
        timer.start()

    def _abandon(self) -> None:
        self.stop()
        if self._in_hand is not None and self._guard is not None:
            # Not in the middle of a step's write: that would leave the connection torn.
            self._guard.interrupt(StopNow())

    def stop(self) -> None:
        self.stopping.set()
        interrupt = getattr(self._waker, "interrupt", None)
        if interrupt is not None:
            interrupt()

    # -- the loop --------------------------------------------------------------
    def run(self) -> int:
        self._waker = make_waker()
        self._register()
        log.info(
            "worker %s: queues=%s concurrency=1 database=%s wake=%s lease=%ss",
            self.options.worker_id,
            ",".join(self.options.queues or ["*"]),
            connections[conf.database()].vendor,
            self._waker.mode,
            self.lease.total_seconds(),
        )
        sync(self.clock.now())  # the schedules of the code this worker runs
        try:
            while not self.stopping.is_set():
                if self.options.max_runs is not None and self.executed >= self.options.max_runs:
                    break
                try:
                    worked = self.run_once()
                    keep_healthy(conf.database())
                except DatabaseError as exc:
                    # A restarted database or a dropped connection: reconnect and carry on.
                    log.warning("worker %s: database error (%s); retrying", self._owner, exc)
                    close_broken_connections()
                    self.stopping.wait(min(self.options.poll_interval.total_seconds(), 1.0))
                    continue
                if worked:
                    continue
                if self.options.burst:
                    break
                self._waker.wait(self.options.poll_interval.total_seconds())
        finally:
            self.flush()
            self._waker.close()
            if self._beat is not None:
                self._beat.stop()
            if self._presence is not None:
                self._presence.stopped(self.clock.now())
            connections.close_all()
        return self.executed

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
            if flow.has_limits() and (freed := flow.unhold_stranded(now=now)):
                log.warning("let %d held run(s) go whose key had free slots", freed)
        self._schedules.tick(now)  # start due schedule slots (cheap unless one is due)
        pending = self._pending
        owner = f"{self.options.worker_id}#{uuid.uuid4().hex[:8]}"
        runs = self._record_and_claim(pending, owner, now)
        if runs:
            self._execute(runs[0])
        return bool(runs) or pending is not None

    def _record_and_claim(self, pending: Pending | None, owner: str, now: datetime) -> list[JobRun]:
        """Record ``pending`` (fenced by ``self._owner``, whose lease it holds) and claim
        for ``owner``. ``self._owner`` only becomes ``owner`` once the statement ran: if it
        raises, the outcome stays pending under the owner that still holds its lease.

        Runs under a flow-control limit are claimed first (``flow.claim_limited`` locks
        their key); an outcome that frees a slot or starts an ``on_failure`` handler is
        never fused with the claim (``Pending.fused``)."""
        using = conf.database()
        if pending is not None:
            faults.hit("outcome.before", using)
        if pending is not None and not (claims_pg.available(using) and pending.fused):
            record(pending, self._owner)
            pending = self._pending = None
            faults.hit("outcome.after", using)
        if claims_pg.available(using):
            runs, recorded = self._claim_limited(owner, now), False
            if runs and pending is not None:
                record(pending, self._owner)
                pending = self._pending = None
                faults.hit("outcome.after", using)
            if not runs:
                finish = None
                if pending is not None:
                    finish = claims_pg.Finish(pending.run.pk, self._owner, pending.outcome_values())
                try:
                    runs, recorded = claims_pg.claim(
                        using, owner, now, self.lease, _queues(self.options.queues), 1, finish
                    )
                except UNSTORABLE as exc:
                    if pending is None:
                        raise
                    # The next iteration writes the outcome in short, with the claim.
                    self._pending = refused(pending, exc)
                    return []
        else:
            runs = claim(
                owner, now=now, lease=self.lease, queues=self.options.queues, clock=self.clock
            )
            recorded = False  # pending was None here: recorded on its own above
        previous, self._owner, self._pending = self._owner, owner, None
        if pending is not None:
            faults.hit("outcome.after", using)
            log_outcome(pending.run, settle(pending, recorded, previous))
        return runs

    def _claim_limited(self, owner: str, now: datetime) -> list[JobRun]:
        if not flow.has_limits():
            return []
        return flow.claim_limited(
            owner, now=now, lease=self.lease, queues=self.options.queues, clock=self.clock
        )

    def flush(self) -> None:
        """Record the outcome still held (before the worker stops or idles); a database
        that stays away for a few seconds leaves the run to its lease."""
        pending, self._pending = self._pending, None
        if pending is not None:
            record_patiently(pending, self._owner)

    def _register(self) -> None:
        """The worker's row (admin, ``jobs workers``): inserted now, kept up to date by
        the heartbeat thread, which therefore starts with the loop."""
        self._presence = Presence(
            self.options.worker_id,
            queues=self.options.queues,
            concurrency=self.options.concurrency,
            lease=self.lease,
            executed=lambda: self.executed,
        )
        self._presence.register(self.clock.now())
        self._heartbeat()

    def _heartbeat(self) -> _Heartbeat:
        if self._beat is None:
            self._beat = _Heartbeat(self.clock, self.lease, self.heartbeat, self._presence)
            self._beat.start()
        return self._beat

    def _execute(self, run: JobRun) -> None:
        log.info(
            "run claimed: run=%s job=%s attempt=%s from=%s",
            run.id,
            run.job_name,
            run.attempt,
            run.claimed_from,
        )
        self._in_hand, self._guard = run, TimeGuard()
        beat = self._heartbeat()
        beat.hold(self._owner, run.id)
        try:
            faults.hit("claim.after", conf.database())
            self._pending = run_to_stop(
                run,
                clock=self.clock,
                owner=self._owner,
                guard=self._guard,
                interrupt=beat.interruption,
            )
        except StopNow:
            released = self._release(run)
            log.warning("run released: run=%s stopping at once (released=%s)", run.id, released)
            self.stopping.set()
            return
        except DatabaseError:
            # Outside the attempt (its first read, the engine's setup): nothing of the job
            # ran, so give the run back at once instead of letting its lease expire,
            # which would count an attempt that never was (X_ATTEMPTS_EXHAUSTED).
            with contextlib.suppress(DatabaseError):  # still down: the lease decides
                log.warning(
                    "run released: run=%s database error before it executed (released=%s)",
                    run.id,
                    self._release(run),
                )
            raise
        finally:
            self._in_hand = self._guard = None
            beat.drop()
        self.executed += 1

    def _release(self, run: JobRun) -> bool:
        try:
            return release(run, self._owner, now=self.clock.now())
        except DatabaseError:  # the stop or the fault cut the connection: once more, afresh
            close_broken_connections()
            return release(run, self._owner, now=self.clock.now())


def _queues(queues: Sequence[str] | None) -> list[str] | None:
    return None if queues is None else list(queues)


class _Heartbeat(threading.Thread):
    """One per worker process, on its own connection: renews the lease of the run in
    hand every ``every``, and notices a cancellation so the run stops at its next step."""

    def __init__(
        self, clock: Clock, lease: timedelta, every: timedelta, presence: Presence | None = None
    ) -> None:
        super().__init__(name="durable-jobs-heartbeat", daemon=True)
        self.clock, self.lease, self.every = clock, lease, every.total_seconds()
        self.presence = presence
        self._lock = threading.Lock()
        self._held: tuple[str, UUID] | None = None
        self._renewed = 0.0  # time.monotonic() of the last claim or renewal of the lease
        self._cancelled = threading.Event()
        self._done = threading.Event()

    def hold(self, owner: str, run_id: UUID) -> None:
        with self._lock:
            self._held, self._renewed = (owner, run_id), time.monotonic()
            self._cancelled.clear()

    def drop(self) -> None:
        with self._lock:
            self._held = None

    def interruption(self) -> BaseException | None:
        """Asked by the engine before each step: a cancellation, or a lease lost while
        this process was frozen (no renewal for a whole lease)."""
        if self._cancelled.is_set():
            return RunCancelled("the run was cancelled while it executed")
        with self._lock:
            held, renewed = self._held, self._renewed
        if held is None or time.monotonic() - renewed < self.lease.total_seconds():
            return None
        # Frozen (SIGSTOP, a VM pause) past the lease: another worker may own the run
        # now. Ask before the next step's side effect, not after it (the fenced write).
        if renew(held[0], [held[1]], now=self.clock.now(), lease=self.lease):
            with self._lock:
                self._renewed = time.monotonic()
            return None
        return LeaseLost(
            f"run {held[1]}: worker {held[0]} was not renewed for a whole lease and lost "
            "it; the next step is not started"
        )

    def run(self) -> None:
        try:
            while not self._done.wait(self.every):
                with self._lock:
                    held = self._held
                try:
                    if held is not None:
                        self._beat(*held)
                    if self.presence is not None:
                        self.presence.beat(self.clock.now())
                except DatabaseError as exc:
                    log.warning("heartbeat failed (%s); reconnecting", exc)
                    connections.close_all()
        finally:
            connections.close_all()

    def _beat(self, owner: str, run_id: UUID) -> None:
        faults.hit("heartbeat", conf.database())
        if renew(owner, [run_id], now=self.clock.now(), lease=self.lease):
            with self._lock:
                if self._held == (owner, run_id):
                    self._renewed = time.monotonic()
            return
        status = (
            JobRun.objects.using(conf.database())
            .filter(pk=run_id)
            .values_list("status", flat=True)
            .first()
        )
        with self._lock:
            if self._held != (owner, run_id):
                return  # the run finished meanwhile
            if status == RunStatus.CANCELLED:
                self._cancelled.set()
            else:
                log.warning("run %s: lease lost (status %s)", run_id, status)

    def stop(self) -> None:
        self._done.set()


# -- several processes ---------------------------------------------------------------


def run_workers(options: WorkerOptions) -> int:
    """Run ``options.concurrency`` worker processes; returns the process exit code."""
    if options.concurrency <= 1:
        worker = Worker(options)
        worker.install_signal_handlers()
        worker.run()
        return 0
    return _Supervisor(options).run()


class _Supervisor:
    def __init__(self, options: WorkerOptions) -> None:
        self.options = options
        self.children: dict[int, int] = {}  # pid -> slot
        self.stopping = False
        self.signals = 0

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self.signals += 1
        self.stopping = True
        forward = signal.SIGUSR1 if self.signals == 1 else signal.SIGUSR2
        for pid in list(self.children):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, forward)

    def _spawn(self, slot: int) -> None:
        connections.close_all()  # never share a connection across fork
        supervisor = os.getpid()
        pid = os.fork()
        if pid == 0:  # the child
            code = 1
            try:
                # Orphaned, it stops at once and gives its run back (see orphans.py).
                stop_with_parent(supervisor, signal.SIGUSR2)
                child = WorkerOptions(
                    **{
                        **self.options.__dict__,
                        "concurrency": 1,
                        "worker_id": f"{self.options.worker_id}/{slot}:{os.getpid()}",
                    }
                )
                worker = Worker(child)
                worker.install_signal_handlers()
                worker.run()
                code = 0
            except BaseException:
                log.exception("worker child %s crashed", slot)
            finally:
                os._exit(code)
        self.children[pid] = slot

    def run(self) -> int:
        signal.signal(signal.SIGTERM, self._on_signal)
        signal.signal(signal.SIGINT, self._on_signal)
        log.info(
            "supervisor %s: %d worker processes", self.options.worker_id, self.options.concurrency
        )
        for slot in range(self.options.concurrency):
            self._spawn(slot)
        failures = 0
        while self.children:
            try:
                pid, status = os.wait()
            except ChildProcessError:
                break
            except InterruptedError:
                continue
            if pid not in self.children:
                continue
            slot = self.children.pop(pid)
            code = os.waitstatus_to_exitcode(status)
            done = self.options.burst or self.options.max_runs is not None
            if code != 0 and not self.stopping:
                failures += 1
                log.error("worker child %s (pid %s) exited with %s; replacing it", slot, pid, code)
                self._spawn(slot)
            elif not done and not self.stopping:
                self._spawn(slot)
        return 0 if failures == 0 or self.stopping else 1
