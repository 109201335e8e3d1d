"""The flow-control options of ``@job`` (docs/how-to/flow-control.md) as values, validated once, at
decoration time; and the keys they compute from a run's arguments. No Django here.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from ..exceptions import InvalidName
from .durations import Duration, format_duration, parse_duration
from .serialization import unstorable
from .signatures import signature_of

#: The name of one of the job's parameters, or a callable of the job's arguments.
Key = str | Callable[..., Any]


@dataclass(frozen=True)
class Concurrency:
    """At most ``limit`` runs of the job (per ``key``) execute at once.

    >>> Concurrency(2, key="customer_id")
    Concurrency(limit=2, key='customer_id')
    """

    limit: int
    key: Key | None = None


@dataclass(frozen=True)
class Throttle:
    """At most ``limit`` runs of the job (per ``key``) start per period ``per``; the
    others are delayed, never dropped.

    >>> Throttle(10, per="1m", key="customer_id")
    Throttle(limit=10, per='1m', key='customer_id')
    """

    limit: int
    per: Duration
    key: Key | None = None


@dataclass(frozen=True)
class Limit:
    """A validated limit of one job: ``kind`` is "concurrency" or "throttle"."""

    kind: str
    limit: int
    key: Key | None
    per: timedelta | None = None
    #: Debounce: the latest start after the first enqueue.
    timeout: timedelta | None = None

    def describe(self) -> str:
        """The limit in the words of docs/how-to/flow-control.md (the worker's banner).

        >>> Limit("throttle", 10, "region", per=timedelta(minutes=1)).describe()
        'throttle 10/1m per region'
        >>> Limit("debounce", 1, "user_id", timedelta(minutes=5), timedelta(hours=1)).describe()
        'debounce 5m per user_id, at most 1h after the first enqueue'
        """
        per = format_duration(self.per) if self.per is not None else ""
        words = {
            "concurrency": f"concurrency {self.limit}",
            "throttle": f"throttle {self.limit}/{per}",
            "rate_limit": f"rate limit {self.limit}/{per}",
            "debounce": f"debounce {per}",
        }.get(self.kind, f"{self.kind} {self.limit}")
        if self.key is not None:
            words += f" per {self.key}" if isinstance(self.key, str) else f" per {_named(self.key)}"
        if self.timeout is not None:
            words += f", at most {format_duration(self.timeout)} after the first enqueue"
        return words

    def key_of(
        self, job_name: str, fn: Callable[..., Any], args: Sequence[Any], kwargs: Mapping[str, Any]
    ) -> str:
        """The key text of one run ("" for a limit over all runs of the job)."""
        if self.key is None:
            return ""
        if callable(self.key):
            value = self.key(*args, **kwargs)
            if not isinstance(value, str):
                raise TypeError(
                    f"job {job_name!r}: the {self.kind} key function returned "
                    f"{value!r}; it must return a string"
                )
        else:
            bound = signature_of(fn).bind(None, *args, **kwargs)
            bound.apply_defaults()
            value = bound.arguments[self.key]
            value = value if isinstance(value, str) else str(value)
        if len(value) > 255:
            raise InvalidName(
                f"job {job_name!r}: the {self.kind} key {value[:40]!r}... is longer than 255 chars"
            )
        if (why := unstorable(value)) is not None:  # PostgreSQL refused it, MariaDB kept it
            raise InvalidName(
                f"job {job_name!r}: the {self.kind} key {value!r} cannot be stored: {why}"
            )
        return value


def _named(key: Callable[..., Any]) -> str:
    """A key function as the banner names it: ``region_of()``."""
    return f"{getattr(key, '__qualname__', None) or type(key).__qualname__}()"


def concurrency(
    value: Concurrency | int | None, job_name: str, fn: Callable[..., Any]
) -> Limit | None:
    """``concurrency=`` of ``@job``, checked: a bare int is a limit over all runs."""
    if value is None:
        return None
    if not isinstance(value, Concurrency):
        value = Concurrency(_limit(value, job_name, "concurrency"))
    limit = _limit(value.limit, job_name, "concurrency")
    return Limit("concurrency", limit, _key(value.key, job_name, fn, "concurrency"))


def throttle(value: Throttle | None, job_name: str, fn: Callable[..., Any]) -> Limit | None:
    """``throttle=`` of ``@job``, checked."""
    if value is None:
        return None
    if not isinstance(value, Throttle):
        raise TypeError(f"job {job_name!r}: throttle must be a Throttle(...), got {value!r}")
    per = _period(value.per, job_name, "throttle")
    key = _key(value.key, job_name, fn, "throttle")
    return Limit("throttle", _limit(value.limit, job_name, "throttle"), key, per)


def _limit(value: object, job_name: str, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"job {job_name!r}: {what} limit must be an int >= 1, got {value!r}")
    return value


def _key(key: object, job_name: str, fn: Callable[..., Any], what: str) -> Key | None:
    if key is None or callable(key):
        return key
    if not isinstance(key, str):
        raise TypeError(
            f"job {job_name!r}: {what} key must be a parameter name or a callable, got {key!r}"
        )
    parameters = list(inspect.signature(fn).parameters)[1:]  # without ctx
    if key not in parameters:
        raise ValueError(
            f"job {job_name!r}: {what} key {key!r} is not a parameter of "
            f"{fn.__qualname__}(ctx, {', '.join(parameters)})"
        )
    return key


@dataclass(frozen=True)
class RateLimit:
    """At most ``limit`` runs of the job (per ``key``) are enqueued per period ``per``;
    a further enqueue returns a run with status ``skipped`` that never executes.

    >>> RateLimit(1, per="1h", key="user_id")
    RateLimit(limit=1, per='1h', key='user_id')
    """

    limit: int
    per: Duration
    key: Key | None = None


@dataclass(frozen=True)
class Debounce:
    """Enqueues (per ``key``) within ``per`` of each other make one run, with the
    latest arguments; it starts once ``per`` passes quietly, or ``timeout`` after the
    first enqueue at the latest.

    >>> Debounce("5m", key="user_id", timeout="1h")
    Debounce(per='5m', key='user_id', timeout='1h')
    """

    per: Duration
    key: Key | None = None
    timeout: Duration | None = None


@dataclass(frozen=True)
class CancelOn:
    """Publishing ``event`` (with a key equal to the run's argument named ``match``,
    if given) cancels the job's unfinished runs enqueued before it.

    >>> CancelOn("order.cancelled", match="order_id")
    CancelOn(event='order.cancelled', match='order_id')
    """

    event: str
    match: str | None = None

    def describe(self) -> str:
        """In the worker's banner: ``cancel on order.cancelled matching order_id``."""
        return f"cancel on {self.event}" + (f" matching {self.match}" if self.match else "")


def rate_limit(value: RateLimit | None, job_name: str, fn: Callable[..., Any]) -> Limit | None:
    """``rate_limit=`` of ``@job``, checked."""
    if value is None:
        return None
    if not isinstance(value, RateLimit):
        raise TypeError(f"job {job_name!r}: rate_limit must be a RateLimit(...), got {value!r}")
    per = _period(value.per, job_name, "rate_limit")
    key = _key(value.key, job_name, fn, "rate_limit")
    return Limit("rate_limit", _limit(value.limit, job_name, "rate_limit"), key, per)


def debounce(value: Debounce | None, job_name: str, fn: Callable[..., Any]) -> Limit | None:
    """``debounce=`` of ``@job``, checked: ``limit`` is unused (1)."""
    if value is None:
        return None
    if not isinstance(value, Debounce):
        raise TypeError(f"job {job_name!r}: debounce must be a Debounce(...), got {value!r}")
    per = _period(value.per, job_name, "debounce")
    timeout = (
        None if value.timeout is None else _period(value.timeout, job_name, "debounce timeout")
    )
    key = _key(value.key, job_name, fn, "debounce")
    return Limit("debounce", 1, key, per, timeout)


def cancel_on(
    value: CancelOn | Sequence[CancelOn] | None, job_name: str, fn: Callable[..., Any]
) -> tuple[CancelOn, ...]:
    """``cancel_on=`` of ``@job`` (one ``CancelOn`` or a list), checked."""
    if value is None:
        return ()
    items = [value] if isinstance(value, CancelOn) else list(value)
    for item in items:
        if not isinstance(item, CancelOn):
            raise TypeError(f"job {job_name!r}: cancel_on takes CancelOn(...) values, got {item!r}")
        if not isinstance(item.event, str) or not item.event or len(item.event) > 200:
            raise ValueError(f"job {job_name!r}: CancelOn event must be a name, got {item.event!r}")
        if item.match is not None:
            _key(item.match, job_name, fn, "cancel_on match")
    return tuple(items)


def _period(value: Duration, job_name: str, what: str) -> timedelta:
    period = parse_duration(value)
    if not period:
        raise ValueError(f"job {job_name!r}: {what} period must be longer than zero")
    return period
