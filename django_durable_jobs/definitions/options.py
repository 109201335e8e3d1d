"""The rules ``@job`` and ``job.using(...)`` apply to each option, one function an option:
each returns the value as the definition keeps it, or raises naming the option."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

from ..engine.durations import Duration, parse_duration
from ..engine.retry import Backoff
from ..engine.serialization import unstorable
from ..exceptions import InvalidDuration, InvalidName


def origin(fn: Callable[..., Any]) -> str:
    """Where a function is defined: ``module.qualname`` (a bare ``@job``'s name)."""
    return f"{fn.__module__}.{fn.__qualname__}"


def text(value: object, what: str, longest: int = 100, where: str = "@job") -> str:
    if not isinstance(value, str) or not value or len(value) > longest:
        raise ValueError(
            f"{where} {what} must be a non-empty string of at most {longest} characters, "
            f"got {value!r}"
        )
    if (why := unstorable(value)) is not None:
        raise InvalidName(f"{where} {what} {value!r} cannot be stored: {why}")
    return value


#: The range of the ``priority`` column (a 32-bit integer on every database).
PRIORITY_RANGE = (-(2**31), 2**31 - 1)


def priority(value: object, where: str = "@job") -> int:
    lowest, highest = PRIORITY_RANGE
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{where} priority must be an int, got {value!r}")
    if not lowest <= value <= highest:
        raise ValueError(f"{where} priority must be between {lowest} and {highest}, got {value!r}")
    return value


def run_after(value: object) -> timedelta:
    try:
        return parse_duration(value)
    except InvalidDuration as exc:
        raise InvalidDuration(
            f"using() run_after must be an aware datetime or a duration: {exc}"
        ) from None


def integer(value: object, what: str, minimum: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"@job {what} must be an int, got {value!r}")
    if minimum is not None and value < minimum:
        raise ValueError(f"@job {what} must be >= {minimum}, got {value!r}")
    return value


#: The largest ``@job(version=...)``: the ``job_version`` column is a 32-bit integer.
MAX_VERSION = 2**31 - 1


def version(value: object) -> int:
    """``@job(version=N)``: a positive int (1 when not given)."""
    checked = integer(value, "version", minimum=1)
    if checked > MAX_VERSION:
        raise ValueError(f"@job version must be at most {MAX_VERSION}, got {value!r}")
    return checked


def positive(value: Duration | None, what: str) -> timedelta | None:
    if value is None:
        return None
    parsed = duration(value, what)
    if not parsed:
        raise ValueError(f"@job {what} must be longer than zero, got {value!r}")
    return parsed


def backoff(value: Backoff | None) -> Backoff | None:
    if value is None or callable(value):
        return value
    duration(value, "backoff")  # fail at import time, not at the first retry
    return value


def duration(value: Duration, what: str) -> timedelta:
    try:
        return parse_duration(value)
    except InvalidDuration as exc:  # say which option
        raise InvalidDuration(f"@job {what}: {exc}") from None
