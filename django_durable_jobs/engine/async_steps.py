"""The step API of async jobs, ``await ctx.step.run(...)``: the engine's plans, awaited.

The decisions are ``steps.py``'s, the same as for sync jobs; this module only
performs their work on an event loop. Store work (blocking database calls) goes
through ``io``, which runs it off the loop (a thread); a write that has started
finishes even if the run is cancelled meanwhile, so a timeout never tears a step
in half. Time limits are ``asyncio`` cancellation: a ``step_timeout`` stops the
awaited step function and fails the step with ``X_JOB_TIMEOUT``.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import inspect
from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime
from typing import Any, TypeVar

from ..exceptions import StepUsageError, Suspension
from . import fanout, otel, patches
from .core import DEFAULT_WAIT_TIMEOUT, Io, Plan, UserCall
from .durations import Duration
from .records import Call, RecordedStep, StepStore
from .step_calls import StepCalls, awaited
from .steps import StepEngine

T = TypeVar("T")

#: Runs blocking work (a store call, a sync step function) off the event loop.
IoRunner = Callable[[Callable[[], Any]], Awaitable[Any]]
#: Puts a step record into a store, off the event loop: the async lane's writes the
#: records of many runs in one statement (``store.put_many``). A future (awaited as it
#: is) or a coroutine (run as a task of its own).
StepWriter = Callable[[StepStore, RecordedStep], Awaitable[None]]


async def in_thread(work: Callable[[], T]) -> T:
    """The default ``IoRunner``: a thread of the loop's default executor."""
    return await asyncio.to_thread(work)


async def inline(work: Callable[[], T]) -> T:
    """An ``IoRunner`` for stores that never block (the in-memory ones of tests)."""
    return work()


class AsyncSteps(StepEngine):
    """The step API an ``async def`` job sees as ``ctx.step``; every method is awaited.

    >>> import asyncio
    >>> from django_durable_jobs.engine.memory import MemoryEventLog, MemoryStepStore
    >>> steps = AsyncSteps(run_id="r1", job_name="demo", store=MemoryStepStore(),
    ...                    events=MemoryEventLog(), io=inline)
    >>> async def double(x): return x * 2
    >>> asyncio.run(steps.run("double", double, 21))
    42
    """

    def __init__(
        self,
        *,
        io: IoRunner = in_thread,
        put: StepWriter | None = None,
        call: IoRunner | None = None,
        **engine: Any,
    ) -> None:
        """``io``: how blocking work is run off the loop; ``put``: how a step record is
        written (default: ``store.put`` through ``io``); ``call``: how a sync step
        function runs off the loop (default: ``io``); the rest is ``StepEngine``'s."""
        super().__init__(**engine)
        self._io = io
        self._put = put
        self._call_sync = call or io

    @classmethod
    def twin(cls, steps: StepEngine, *, io: IoRunner) -> AsyncSteps:
        """The same attempt, awaited: for a sync job that awaits async code (an async
        ``django.tasks`` task). Both share the attempt's records and used names; the
        records must be read already (a step ran), so that neither reads them again."""
        twin = cls.__new__(cls)
        twin.__dict__.update(steps.__dict__)
        twin._io = twin._call_sync = io
        twin._put = None
        return twin

    @awaited
    async def run(self, name: str, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
        """Run ``fn(*args, **kwargs)`` once, ever (awaited if it is async; a sync ``fn``
        runs in a thread), and return its stored output."""
        return await self._perform(self._run(name, fn, args, kwargs))

    @awaited
    async def atomic(self, name: str, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
        """``step.atomic`` of sync jobs, awaited: ``fn`` is a plain function, run in a
        thread inside one transaction on the jobs database that also records the step."""
        return await self._perform(self._atomic(name, fn, args, kwargs))

    @awaited
    async def sleep(
        self, name_or_duration: str | Duration, duration: Duration | None = None
    ) -> None:
        """``await sleep("3d")`` (step ``sleep:3d``) or ``await sleep("cool-off", "3d")``."""
        await self._perform(self._sleep(*self._sleep_args(name_or_duration, duration)))

    @awaited
    async def sleep_until(self, name: str, when: datetime) -> None:
        """Suspend until ``when`` (an aware datetime)."""
        await self._perform(self._sleep(name, self._until(name, when)))

    @awaited
    async def wait_for_event(
        self,
        name: str,
        event: str,
        *,
        timeout: Duration = DEFAULT_WAIT_TIMEOUT,
        match: str | None = None,
        required: bool = False,
    ) -> Any:
        """As ``Steps.wait_for_event``: the payload, or ``None`` on timeout."""
        return await self._perform(self._wait(name, event, timeout, match, required))

    @awaited
    async def receive(
        self,
        name: str,
        topic: str,
        *,
        timeout: Duration = DEFAULT_WAIT_TIMEOUT,
        required: bool = False,
    ) -> Any:
        """As ``Steps.receive``: the oldest message of ``topic`` not yet received, or
        ``None`` on timeout."""
        return await self._perform(self._receive(name, topic, timeout, required))

    @awaited
    async def publish(
        self, name: str, event: str, payload: Any = None, *, key: str | None = None
    ) -> int:
        """Publish ``event`` as a step: exactly one event however often the run replays."""
        return await self._perform(self._publish(name, event, payload, key))

    @awaited
    async def invoke(
        self,
        name: str,
        job: Any,
        /,
        *args: Any,
        timeout: Duration = DEFAULT_WAIT_TIMEOUT,
        **kwargs: Any,
    ) -> Any:
        """Start a child run of ``job`` and suspend until it finishes; its result."""
        return await self._perform(self._invoke(name, job, args, kwargs, timeout))

    # -- fan-out (fanout.py) -------------------------------------------------
    @awaited
    async def invoke_all(
        self, name: str, calls: Sequence[Call], /, *, timeout: Duration = DEFAULT_WAIT_TIMEOUT
    ) -> list[Any]:
        """Start one child run per ``job.call(...)`` in ``calls`` and suspend until all
        finished (woken once, by the last); their results in order. If any failed,
        ``ChildRunFailed`` names the first, once all have finished.

        >>> calls = [total.call(o) for o in ids]  # doctest: +SKIP
        >>> totals = await ctx.step.invoke_all("totals", calls)  # doctest: +SKIP
        """
        return await self._perform(fanout.invoke_all(self, name, calls, timeout))

    @awaited
    async def map(
        self,
        name: str,
        job: Any,
        items: Sequence[Any],
        /,
        *,
        timeout: Duration = DEFAULT_WAIT_TIMEOUT,
    ) -> list[Any]:
        """``invoke_all`` with ``job.call(item)`` for each item."""
        return await self.invoke_all(name, [Call(job, (item,)) for item in items], timeout=timeout)

    # -- patches (patches.py): not awaited, as a sync job's ---------------------
    def patched(self, change_id: str) -> bool:
        """``ctx.patched``: decided from the records the worker read before the job
        started; the answer is written before the run's next record, or when the job
        returns (``save_answers``)."""
        self._read_first("patched", change_id)
        answer, record = patches.answer(self, change_id)
        if record is not None:
            self._unsaved.append(record)
        return answer

    def deprecate_patch(self, change_id: str) -> None:
        """``ctx.deprecate_patch``: the patch's old branch is gone; either answer stands."""
        self._read_first("deprecate_patch", change_id)
        patches.deprecate(self, change_id)

    async def save_answers(self) -> None:
        """Write the patches' answers not written yet (the job returned after them)."""
        if self._unsaved:
            await self._carry_out(self._save_answers())

    def _read_first(self, what: str, change_id: str) -> None:
        if not self._loaded:
            raise StepUsageError(
                f"job {self.job_name!r}: ctx.{what}({change_id!r}) needs the run's records "
                "read before the job starts (the worker does: pass records= to AsyncSteps)"
            )

    # -- the attempt's end ---------------------------------------------------
    def check_awaited(self, *, fail: bool = True) -> None:
        """Raise ``StepUsageError`` for the step calls of this attempt never awaited
        (nor handed to a task): each is closed, so Python does not warn about it
        later. ``fail=False``: only close them (the attempt stopped another way)."""
        calls: StepCalls | None = self.__dict__.pop("_calls", None)
        if calls is None or not calls.unstarted():
            # Every call was awaited: the loop's tasks need not be read (a read of all
            # of them per attempt was O(N²) with a thousand runs in flight).
            return
        try:
            scheduled = {id(task.get_coro()) for task in asyncio.all_tasks()}
        except RuntimeError:  # no running loop
            scheduled = set()
        never = calls.never_started(scheduled)
        for _, coroutine in never:
            coroutine.close()
        if never and fail:
            shown = ", ".join(what for what, _ in never)
            raise StepUsageError(
                f"job {self.job_name!r} run {self.run_id}: ctx.step.{shown} was never "
                "awaited, so it did not run: write `await ctx.step...` in an async def job"
            )

    async def finish_started(self, within: float | None = None) -> None:
        """Wait for the steps of this attempt that still execute in tasks of their own
        (``asyncio.gather``'s others when one step suspended the run or failed): each
        step's record is written before the attempt ends. Ended at once, their records
        were refused (the lease let go) or never written, and the resumed run executed
        them again. ``within``: the seconds the job's ``timeout`` leaves (None: no
        timeout); a step still executing then is not waited for."""
        calls: StepCalls | None = self.__dict__.get("_calls")
        mine = calls.ids() if calls is not None else set()
        if not mine:  # each call finished: no task of the loop to look for
            return
        tasks = [t for t in asyncio.all_tasks() if not t.done() and id(t.get_coro()) in mine]
        if tasks:
            await asyncio.wait(tasks, timeout=None if within is None else max(within, 0))

    # -- performing a plan ---------------------------------------------------
    async def _perform(self, plan: Plan[T]) -> T:
        """Carry out one step. One that ends the attempt (it suspended the run, or it
        failed) first waits for the steps of this attempt still executing beside it
        (``asyncio.gather``, a ``TaskGroup``, tasks of the job's own), so that each
        of those is recorded: a ``TaskGroup`` cancels its other tasks as soon as one
        raises, and a step cut off after its side effect ran again when the run
        resumed. The wait is inside the job's ``timeout``."""
        executing: dict[asyncio.Future[None], Any] = self.__dict__.setdefault("_executing", {})
        mine: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        task = asyncio.current_task()
        executing[mine] = task
        try:
            return await self._carry_out(plan)
        except asyncio.CancelledError:
            raise
        except BaseException:
            _done(executing, mine)
            # The others, and any step they start meanwhile; not the steps this one is
            # part of (``invoke_all`` performs its own), which wait for it.
            while others := {f for f, t in executing.items() if t is not task}:
                await asyncio.wait(others)
            raise
        finally:
            _done(executing, mine)

    async def _carry_out(self, plan: Plan[T]) -> T:
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
                sent = await self._do(work)
            except BaseException as exc:  # the plan decides (a failed step is recorded)
                failure = exc

    async def _do(self, work: Io | UserCall) -> Any:
        if isinstance(work, UserCall):
            return await self._call(work)
        if not work.write:
            return await self._io(work.work)
        if work.record is not None and self._put is not None:
            return await _finished(asyncio.ensure_future(self._put(self._store, work.record)))
        return await _finished(asyncio.ensure_future(self._io(work.work)))

    async def _call(self, work: UserCall) -> Any:
        limit = self._limits.step_timeout
        scope = asyncio.timeout(limit.total_seconds() if limit is not None else None)
        try:
            with otel.step_span(work.name, self.run_id, work.attempts):
                async with scope:
                    return await self._user_code(work)
        except TimeoutError:
            if scope.expired():
                raise self._step_timeout(work.name) from None
            raise  # the step's own TimeoutError: a failure like any other

    async def _user_code(self, work: UserCall) -> Any:
        if inspect.iscoroutinefunction(work.fn):
            return await work.fn(*work.args, **work.kwargs)
        value = await self._call_sync(functools.partial(work.fn, *work.args, **work.kwargs))
        return (await value) if inspect.isawaitable(value) else value


async def _finished(write: asyncio.Future[T]) -> T:
    """Await a write to its end even when the awaiting task is cancelled meanwhile (the
    cancellation is delivered right after): a step is stored whole or not at all."""
    try:
        return await asyncio.shield(write)
    except asyncio.CancelledError:
        while not write.done():
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.wait({write})
        raise


def _done(executing: dict[asyncio.Future[None], Any], step: asyncio.Future[None]) -> None:
    """``step`` no longer executes (``AsyncSteps._perform``)."""
    executing.pop(step, None)
    if not step.done():
        step.set_result(None)
