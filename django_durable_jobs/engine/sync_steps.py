"""The step API of sync jobs, ``ctx.step``: the engine's plans, performed by calling.

The decisions (replay, records, deadlines) live in ``steps.py`` and are shared
with ``AsyncSteps``; this module only performs their work in the calling thread,
under the ``TimeGuard`` (SIGALRM) limits of the worker's main thread.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from datetime import datetime
from typing import Any, TypeVar

from ..exceptions import StepUsageError, Suspension
from . import fanout, otel
from .core import (
    DEFAULT_EVENT_POLL,
    DEFAULT_WAIT_TIMEOUT,
    MAX_EVENT_NAME,
    MAX_KEY,
    MAX_STEP_NAME,
    STEP_LOST,
    Io,
    Plan,
    StepLimits,
    UserCall,
)
from .durations import Duration
from .memory import MemoryChildRuns, MemoryEventLog, MemoryStepStore
from .records import (
    Call,
    ChildOutcome,
    ChildRuns,
    EventHit,
    EventLookup,
    RecordedStep,
    StepStatus,
    StepStore,
)
from .steps import StepEngine
from .timeouts import TimeGuard

__all__ = [
    "DEFAULT_EVENT_POLL",
    "DEFAULT_WAIT_TIMEOUT",
    "MAX_EVENT_NAME",
    "MAX_KEY",
    "MAX_STEP_NAME",
    "STEP_LOST",
    "ChildOutcome",
    "ChildRuns",
    "EventHit",
    "EventLookup",
    "MemoryChildRuns",
    "MemoryEventLog",
    "MemoryStepStore",
    "RecordedStep",
    "StepLimits",
    "StepStatus",
    "StepStore",
    "Steps",
]

T = TypeVar("T")


class Steps(StepEngine):
    """The step API a sync job sees as ``ctx.step``.

    >>> store, events = MemoryStepStore(), MemoryEventLog()
    >>> steps = Steps(run_id="r1", job_name="demo", store=store, events=events)
    >>> steps.run("double", lambda x: x * 2, 21)
    42
    """

    def __init__(self, *, guard: TimeGuard | None = None, **engine: Any) -> None:
        """``guard``: the time limits of the thread that runs the job (SIGALRM in the
        worker's main thread); the rest is ``StepEngine``'s."""
        super().__init__(**engine)
        self._guard = guard or TimeGuard()

    def run(self, name: str, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> Any:
        """Run ``fn(*args, **kwargs)`` once, ever, and return its stored output."""
        return self._perform(self._run(name, fn, args, kwargs))

    def atomic(self, name: str, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> Any:
        """Run ``fn(*args, **kwargs)`` once, ever, inside one transaction on the jobs
        database that also records the step: its writes there take effect exactly once.
        ``on_commit`` callbacks it registers run after that commit; a write through
        another database is refused (``StepUsageError``).

        >>> ctx.step.atomic("mark-paid", mark_paid, order_id)  # doctest: +SKIP
        """
        return self._perform(self._atomic(name, fn, args, kwargs))

    def sleep(self, name_or_duration: str | Duration, duration: Duration | None = None) -> None:
        """``sleep("3d")`` (step named ``sleep:3d``) or ``sleep("cool-off", "3d")``."""
        self._perform(self._sleep(*self._sleep_args(name_or_duration, duration)))

    def sleep_until(self, name: str, when: datetime) -> None:
        """Suspend until ``when`` (an aware datetime)."""
        self._perform(self._sleep(name, self._until(name, when)))

    def wait_for_event(
        self,
        name: str,
        event: str,
        *,
        timeout: Duration = DEFAULT_WAIT_TIMEOUT,
        match: str | None = None,
        required: bool = False,
    ) -> Any:
        """Wait for the first ``event`` (with key ``match``) published after this step
        first started; return its payload, or ``None`` on timeout (``required=True``:
        fail the run with ``X_JOB_TIMEOUT``)."""
        return self._perform(self._wait(name, event, timeout, match, required))

    def receive(
        self,
        name: str,
        topic: str,
        *,
        timeout: Duration = DEFAULT_WAIT_TIMEOUT,
        required: bool = False,
    ) -> Any:
        """Return the payload of the oldest message of ``topic`` sent to this run
        (``send``) and not received yet, suspending the run until one is sent; ``None``
        after ``timeout`` (``required=True``: fail the run with ``X_JOB_TIMEOUT``).
        Each message is received once, in the order sent; one sent before the step
        started waits for it. The message's reception commits with the step's record.

        >>> decision = ctx.step.receive("approval", "approval", timeout="2d")  # doctest: +SKIP
        """
        return self._perform(self._receive(name, topic, timeout, required))

    def publish(self, name: str, event: str, payload: Any = None, *, key: str | None = None) -> int:
        """Publish ``event`` as a step: exactly one event however often the run replays.

        The event and the step record commit together; returns the event's id.
        """
        return self._perform(self._publish(name, event, payload, key))

    def invoke(
        self,
        name: str,
        job: Any,
        /,
        *args: Any,
        timeout: Duration = DEFAULT_WAIT_TIMEOUT,
        **kwargs: Any,
    ) -> Any:
        """Start a child run of ``job`` and suspend until it finishes; return its result,
        raise ``ChildRunFailed`` if it failed, ``JobTimeoutError`` after ``timeout``."""
        return self._perform(self._invoke(name, job, args, kwargs, timeout))

    # -- patches (patches.py) -----------------------------------------------
    def patched(self, change_id: str) -> bool:
        """``ctx.patched``: whether this run takes the new code at this point, decided
        the first time it gets here and recorded (step ``patch:<change_id>``)."""
        return self._perform(self._patched(change_id))

    def deprecate_patch(self, change_id: str) -> None:
        """``ctx.deprecate_patch``: the patch's old branch is gone; either answer stands."""
        self._perform(self._deprecate_patch(change_id))

    def unreached_steps(self) -> list[str]:
        """As ``StepEngine.unreached_steps``; the records are read if no step read them."""
        if not self._loaded:
            self._perform(self._load())
        return super().unreached_steps() or []

    # -- fan-out (fanout.py) -------------------------------------------------
    def invoke_all(
        self, name: str, calls: Sequence[Call], /, *, timeout: Duration = DEFAULT_WAIT_TIMEOUT
    ) -> list[Any]:
        """Start one child run per ``job.call(...)`` in ``calls`` and suspend until all
        finished (woken once, by the last); their results in order. If any failed,
        ``ChildRunFailed`` names the first, once all have finished.

        >>> totals = ctx.step.invoke_all("totals", [total.call(o) for o in ids])  # doctest: +SKIP
        """
        return self._perform(fanout.invoke_all(self, name, calls, timeout))

    def map(
        self,
        name: str,
        job: Any,
        items: Sequence[Any],
        /,
        *,
        timeout: Duration = DEFAULT_WAIT_TIMEOUT,
    ) -> list[Any]:
        """``invoke_all`` with ``job.call(item)`` for each item."""
        return self.invoke_all(name, [Call(job, (item,)) for item in items], timeout=timeout)

    # -- performing a plan ---------------------------------------------------
    def _perform(self, plan: Plan[T]) -> T:
        sent: Any = None
        failure: BaseException | None = None
        while True:
            try:
                work = plan.send(sent) if failure is None else plan.throw(failure)
            except StopIteration as done:
                return done.value  # type: ignore[no-any-return]
            except Suspension as suspension:  # the job must let it unwind (``swallowed``)
                self.suspended = suspension
                raise
            sent, failure = None, None
            try:
                sent = self._do(work)
            except BaseException as exc:  # the plan decides (a failed step is recorded)
                failure = exc

    def _do(self, work: Io | UserCall) -> Any:
        if isinstance(work, Io):
            if not work.write:
                return work.work()
            with self._guard.shield():
                return work.work()
        with self._step_limit(work), otel.step_span(work.name, self.run_id, work.attempts):
            value = work.fn(*work.args, **work.kwargs)
        if inspect.isawaitable(value):
            close = getattr(value, "close", None)
            if close is not None:
                close()
            raise StepUsageError(
                f"job {self.job_name!r}: step {work.name!r} returned an awaitable; "
                "async step functions need an async def job (await ctx.step.run(...))"
            )
        return value

    def _step_limit(self, work: UserCall) -> AbstractContextManager[None]:
        limit = self._limits.step_timeout
        if limit is None:
            return nullcontext()
        return self._guard.limit(limit.total_seconds(), lambda: self._step_timeout(work.name))
