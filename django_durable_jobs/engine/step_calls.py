"""The step calls of one async attempt, remembered until it ends (``async_steps.py``).

``ctx.step.run(...)`` without ``await`` makes a coroutine that never runs: the step
silently never happened. So every call's coroutine is kept, and the attempt's end
names those never awaited (``AsyncSteps.check_awaited``) and waits for those still
executing in tasks of their own (``AsyncSteps.finish_started``). A long job forgets
the calls that finished now and then: when the calls kept are twice as many as the
last forgetting left (and at least ``FORGET_FROM``), so that each call is looked at
twice on average (amortized O(1) per call). Looking at every call kept on each call
past a fixed count was O(N²) when none had finished: a gather of 5,000 steps makes
them all before it starts any, and that blocked the event loop 1.8 s.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Coroutine
from inspect import CORO_CLOSED, CORO_CREATED
from typing import Any, Concatenate, ParamSpec, Protocol, TypeVar

from asgiref.sync import markcoroutinefunction

T = TypeVar("T")
P = ParamSpec("P")

#: The fewest calls kept before the finished ones are first forgotten.
FORGET_FROM = 256


class StepCalls:
    """The coroutines of an attempt's step calls, each with what it was (for the error
    message), minus those that finished when the list was last pruned."""

    def __init__(self) -> None:
        self._calls: list[tuple[str, Coroutine[Any, Any, Any]]] = []
        self._prune_at = FORGET_FROM

    def add(self, what: str, coroutine: Coroutine[Any, Any, Any]) -> None:
        if len(self._calls) >= self._prune_at:
            self._calls = [c for c in self._calls if inspect.getcoroutinestate(c[1]) != CORO_CLOSED]
            # Twice what is left: at least as many new calls as the next prune looks
            # at come before it, so each call is looked at twice at most, on average.
            self._prune_at = max(FORGET_FROM, 2 * len(self._calls))
        self._calls.append((what, coroutine))

    def ids(self) -> set[int]:
        """The ``id`` of each coroutine kept that has not finished (a task's
        ``get_coro()`` is one of them while the task runs)."""
        return {
            id(coroutine)
            for _, coroutine in self._calls
            if inspect.getcoroutinestate(coroutine) != CORO_CLOSED
        }

    def unstarted(self) -> list[tuple[str, Coroutine[Any, Any, Any]]]:
        """The calls whose coroutine has not started: never awaited, or handed to a task
        that has not run yet (``never_started`` tells them apart)."""
        return [c for c in self._calls if inspect.getcoroutinestate(c[1]) == CORO_CREATED]

    def never_started(self, scheduled: set[int]) -> list[tuple[str, Coroutine[Any, Any, Any]]]:
        """The calls whose coroutine never started and is not in ``scheduled`` (the ids
        of the coroutines of the loop's tasks: handed to a task, it starts soon)."""
        return [(what, coro) for what, coro in self.unstarted() if id(coro) not in scheduled]


class _HasCalls(Protocol):
    __dict__: dict[str, Any]


S = TypeVar("S", bound=_HasCalls)


def awaited(
    method: Callable[Concatenate[S, P], Coroutine[Any, Any, T]],
) -> Callable[Concatenate[S, P], Coroutine[Any, Any, T]]:
    """A step method whose coroutine is kept in its object's ``StepCalls`` (``_calls``)
    until the attempt ends, so that one never awaited fails the run instead."""

    @functools.wraps(method)
    def step(self: S, /, *args: P.args, **kwargs: P.kwargs) -> Coroutine[Any, Any, T]:
        coroutine = method(self, *args, **kwargs)
        calls: StepCalls = self.__dict__.setdefault("_calls", StepCalls())
        calls.add(f"{method.__name__}({args[0]!r})" if args else method.__name__, coroutine)
        return coroutine

    # Still a coroutine function to whoever asks (``asgiref.sync.iscoroutinefunction``;
    # ``inspect``'s too from Python 3.12 on).
    return markcoroutinefunction(step)
