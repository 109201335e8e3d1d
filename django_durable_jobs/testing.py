"""Test helpers for your own test suite: run jobs inline, on a fake clock.

Runs execute in the test's own process and database (no worker), the way
``runjobs`` executes them: claimed, executed to their next stop, recorded. The
clock is a ``FakeClock`` that moves only when told, so a flow that sleeps for
three days and waits a week for an event is tested in milliseconds.

pytest (the ``durable_jobs`` fixture comes with the package, as a pytest plugin)::

    def test_onboarding_nudges_without_an_order(durable_jobs):
        run = durable_jobs.run(onboarding, customer_id=42)  # sleeps and waits skipped
        assert run.result == {"ordered": False}
        assert durable_jobs.step(run, "nudge").status == "completed"

unittest / Django's ``TestCase``::

    class OnboardingTests(TestCase):
        def setUp(self):
            self.jobs = InlineJobs().start()
            self.addCleanup(self.jobs.stop)

Waiting steps do not poll here: ``drain`` wakes a waiting run as soon as a
matching event exists, including events published inside the test's transaction
(whose on-commit wake-up never fires in a ``TestCase``), and a receiving run as soon
as a message of its topic was sent. ``run.wait()`` (a view that waits for its job)
executes what is runnable first, inline; a run still unfinished then raises
``TimeoutError`` at once, since nothing moves the fake clock while it waits.

Pauses hold here as in a worker (``verbs/pauses.py``): the runs of a paused queue or
job are not executed until it is resumed; ``drain`` reads the pauses before each claim.
"""

from __future__ import annotations

import random
from contextlib import ExitStack
from datetime import datetime, timedelta
from typing import Any

from django.db.models import Min
from django.test import override_settings

from . import conf
from .db.claims import claim, release
from .declare import Job, JobCall
from .definitions.registry import JobDefinition
from .engine import clock as clocks
from .engine.clock import FakeClock
from .engine.durations import Duration, parse_duration
from .engine.serialization import error_line
from .engine.timeouts import TimeGuard
from .engine.vocabulary import StepKind
from .models import (
    RUNNABLE,
    Event,
    JobRun,
    JobRunQuerySet,
    Message,
    RunStatus,
    StepRecord,
    StepStatus,
)
from .verbs import results
from .verbs.enqueue import enqueue
from .verbs.events import publish_event
from .verbs.messages import send
from .worker.execution import execute
from .worker.pauses import PauseWatch

#: Long enough that a waiting step parks until its deadline; events wake it instead.
_NO_POLL = "3650d"
_LEASE = timedelta(minutes=5)


class RunNotSucceeded(AssertionError):
    """``InlineJobs.result`` of a run that did not succeed; says why."""


class RunStuck(AssertionError):
    """``InlineJobs.finish``: the run cannot finish (nothing will ever wake it)."""


class InlineJobs:
    """Run jobs inline against the test database with a fake clock.

    >>> with InlineJobs() as jobs:  # doctest: +SKIP
    ...     run = jobs.enqueue(onboarding, customer_id=42)
    ...     jobs.drain()                      # runs until the first sleep
    ...     jobs.advance("2s")                # the sleep is over: runs on
    ...     jobs.publish("order.paid", {"order_id": 7}, key="42")
    ...     assert jobs.result(run)["ordered"]
    """

    def __init__(
        self,
        *,
        start: datetime | None = None,
        owner: str = "inline-test-worker",
        seed: int = 0,
    ) -> None:
        self.clock = FakeClock(start)
        self.owner = owner
        self.rng = random.Random(seed)
        # Read before every claim (every=0): a pause or resume in the test holds at once.
        self.pauses = PauseWatch(0.0, owner)
        self._stack: ExitStack | None = None

    # -- lifecycle -----------------------------------------------------------------
    def start(self) -> InlineJobs:
        """Install the fake clock (for enqueues and events too) until ``stop``."""
        if self._stack is not None:
            raise RuntimeError("InlineJobs is already started")
        stack = ExitStack()
        stack.enter_context(clocks.use(self.clock))
        stack.enter_context(
            override_settings(DURABLE_JOBS={**conf.user_settings(), "EVENT_POLL": _NO_POLL})
        )
        # run.wait() executes what is runnable first (a view that waits for its job).
        stack.callback(results.use_inline(self.drain))
        self._stack = stack
        return self

    def stop(self) -> None:
        if self._stack is not None:
            self._stack.close()
            self._stack = None

    def __enter__(self) -> InlineJobs:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    @property
    def now(self) -> datetime:
        return self.clock.now()

    # -- driving runs ----------------------------------------------------------------
    def enqueue(self, job: Job | JobCall | str, /, *args: Any, **kwargs: Any) -> JobRun:
        """Enqueue a run (nothing executes until ``drain``)."""
        if isinstance(job, str):
            return enqueue(job, *args, **kwargs)
        return job.enqueue(*args, **kwargs)

    def run(self, job: Job | JobCall | str, /, *args: Any, **kwargs: Any) -> JobRun:
        """Enqueue a run and ``finish`` it: returns the finished ``JobRun``."""
        return self.finish(self.enqueue(job, *args, **kwargs))

    def drain(self, *, limit: int = 1000) -> int:
        """Execute every run that is runnable now, again and again (runs woken by
        events, child runs, retries due now) until none is; returns how many
        executions. Raises ``RuntimeError`` past ``limit`` (a run that never settles).
        The runs of a paused queue or job stay where they are, as a worker leaves them.
        """
        executed = 0
        while True:
            self._wake_arrived()
            paused = self.pauses.current()
            claimed = claim(self.owner, now=self.now, lease=_LEASE, limit=1, paused=paused)
            if not claimed:
                return executed
            if executed >= limit:
                release(claimed[0], self.owner, now=self.now)
                raise RuntimeError(f"drain: runs are still runnable after {limit} executions")
            execute(
                claimed[0],
                clock=self.clock,
                owner=self.owner,
                guard=TimeGuard(use_signals=False),
                rng=self.rng,
            )
            executed += 1

    def advance(self, duration: Duration, *, drain: bool = True, limit: int = 1000) -> datetime:
        """Let ``duration`` pass (``"3d"``, a ``timedelta``, seconds) with a worker running:
        what is runnable now executes first, then the clock stops at each wake-up on the
        way (a sleep, a wait's timeout, a backoff) to drain, and ends ``duration`` later.
        Right after ``enqueue``, ``advance("3d")`` therefore runs the job up to its
        ``sleep("3d")`` and on past it. Returns the new time.

        With ``drain=False`` only the clock moves.
        """
        target = self.now + parse_duration(duration)
        if not drain:
            self.clock.set(target)
            return target
        self.drain()
        for _ in range(limit):
            upcoming = self._runs().filter(
                status__in=RUNNABLE, wake_at__gt=self.now, wake_at__lte=target
            )
            wake_at = upcoming.aggregate(next=Min("wake_at"))["next"]
            if wake_at is None:
                break
            self.clock.set(wake_at)
            self.drain()
        else:
            raise RuntimeError(f"advance: runs still wake up after {limit} wake-ups")
        self.clock.set(target)
        self.drain()
        return target

    def finish(self, run: JobRun, *, limit: int = 1000) -> JobRun:
        """Drain, and fast-forward the clock to the next wake-up (a sleep, a wait's
        timeout, a retry's backoff), until ``run`` is finished; returns it refreshed.
        Raises ``RunStuck`` when nothing is scheduled to wake it."""
        for _ in range(limit):
            self.drain()
            run.refresh_from_db()
            if run.is_finished:
                return run
            upcoming = self._runs().filter(status__in=RUNNABLE, wake_at__gt=self.now)
            wake_at = upcoming.aggregate(next=Min("wake_at"))["next"]
            if wake_at is None:
                raise RunStuck(
                    f"run {run.id} ({run.job_name}) is {run.status} and nothing is "
                    f"scheduled to wake it{self._paused_note(run)}"
                )
            self.clock.set(wake_at)
        raise RunStuck(f"run {run.id} ({run.job_name}) did not finish within {limit} wake-ups")

    def publish(
        self, event: str, payload: Any = None, *, key: str | None = None, drain: bool = True
    ) -> Event:
        """Publish an event (as ``publish_event``), then ``drain``."""
        published = publish_event(event, payload, key=key)
        if drain:
            self.drain()
        return published

    def send(self, run: JobRun, topic: str, payload: Any = None, *, drain: bool = True) -> Message:
        """Send a message to ``run`` (as ``send``), then ``drain``."""
        message = send(run.pk, topic, payload)
        if drain:
            self.drain()
        return message

    # -- inspecting --------------------------------------------------------------------
    def refresh(self, run: JobRun) -> JobRun:
        run.refresh_from_db()
        return run

    def result(self, run: JobRun) -> Any:
        """The result of a succeeded run; ``RunNotSucceeded`` (with its error) otherwise."""
        run.refresh_from_db()
        if run.status != RunStatus.SUCCEEDED:
            error = error_line(run.error_type, run.error, code=run.error_code)
            detail = f": {error}" if error else ""
            trace = f"\n{run.traceback}" if run.traceback else ""
            raise RunNotSucceeded(f"run {run.id} ({run.job_name}) is {run.status}{detail}{trace}")
        return run.result

    def steps(self, run: JobRun) -> list[StepRecord]:
        """The run's step records, in the order each step first ran."""
        return list(StepRecord.objects.using(conf.database()).filter(run=run).order_by("id"))

    def step(self, run: JobRun, name: str) -> StepRecord:
        """One step record by name; ``LookupError`` naming the steps there are."""
        for record in self.steps(run):
            if record.name == name:
                return record
        names = ", ".join(repr(record.name) for record in self.steps(run)) or "none"
        raise LookupError(f"run {run.id} has no step {name!r} (steps: {names})")

    def runs(self, job: JobDefinition | str | None = None) -> list[JobRun]:
        """Runs, oldest first; of one job if given (child runs and ``on_event`` runs too)."""
        runs = self._runs().order_by("created_at", "id")
        if job is not None:
            runs = runs.filter(job_name=job if isinstance(job, str) else job.name)
        return list(runs)

    def events(self, name: str | None = None) -> list[Event]:
        """Published events, oldest first; only those named ``name`` if given."""
        events = Event.objects.using(conf.database()).order_by("id")
        return list(events if name is None else events.filter(name=name))

    # -- helpers -------------------------------------------------------------------------
    def _runs(self) -> JobRunQuerySet:
        return JobRun.objects.using(conf.database())

    def _paused_note(self, run: JobRun) -> str:
        """Why a runnable run stays: its queue or its job is paused."""
        paused = self.pauses.read()
        if run.queue in paused.queues:
            return f" (its queue {run.queue!r} is paused)"
        if run.job_name in paused.jobs:
            return " (its job is paused)"
        return ""

    def _wake_arrived(self) -> None:
        """Make runnable now every waiting run whose event has been published."""
        using = conf.database()
        waiting = StepRecord.objects.using(using).filter(
            status=StepStatus.WAITING, run__status=RunStatus.WAITING, run__wake_at__gt=self.now
        )
        receiving = waiting.filter(kind=StepKind.RECEIVE)
        for run_id, topic in receiving.values_list("run_id", "event"):
            if Message.objects.using(using).unreceived(run_id, topic).exists():
                self._runs().filter(pk=run_id).wake_waiting(self.now)
        for step in waiting.exclude(event="").exclude(event_cursor=None):
            arrived = Event.objects.using(using).matching(
                step.event, step.correlation_key, step.event_cursor or 0
            )
            if arrived.exists():
                self._runs().filter(pk=step.run_id).wake_waiting(self.now)


def inline_jobs(**options: Any) -> InlineJobs:
    """``with inline_jobs() as jobs:`` — the same as ``InlineJobs(**options)``."""
    return InlineJobs(**options)


__all__ = ["InlineJobs", "RunNotSucceeded", "RunStuck", "inline_jobs"]
