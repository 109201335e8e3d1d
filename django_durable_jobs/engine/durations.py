"""The only parser of durations: ``timedelta``, seconds, or strings like ``"1h30m"``."""

from __future__ import annotations

import functools
import math
import re
from datetime import datetime, timedelta

from .errors import InvalidDuration

Duration = timedelta | int | float | str

_UNITS = {
    "ms": timedelta(milliseconds=1),
    "s": timedelta(seconds=1),
    "m": timedelta(minutes=1),
    "h": timedelta(hours=1),
    "d": timedelta(days=1),
    "w": timedelta(weeks=1),
}
# ASCII: without it \d also matches other scripts' digits, which float() reads.
_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d|w)", re.ASCII)
_WHOLE = re.compile(r"(?:\d+(?:\.\d+)?(?:ms|s|m|h|d|w))+", re.ASCII)


def parse_duration(value: object) -> timedelta:
    """Turn a duration into a ``timedelta``.

    >>> parse_duration("1h30m")
    datetime.timedelta(seconds=5400)
    >>> parse_duration(2.5)
    datetime.timedelta(seconds=2, microseconds=500000)

    Anything else (negative, NaN, ``"5 mins"``, a bool, overflow) raises
    ``InvalidDuration`` naming the value.
    """
    text = value if type(value) is str else None
    if text is not None and (known := _PARSED.get(text)) is not None:
        return known
    try:
        result = _parse(value)
    except (OverflowError, ValueError) as exc:
        if isinstance(exc, InvalidDuration):
            raise
        raise _invalid(value, "it is too large") from exc
    if result < timedelta(0):
        raise _invalid(value, "it is negative")
    if text is not None and len(_PARSED) < 1024:
        _PARSED[text] = result
    return result


#: Durations parsed from text: the settings' (``"60s"``, ``"30s"``) are read on every
#: run, and a ``timedelta`` is immutable. Bounded, for text that comes from users.
_PARSED: dict[str, timedelta] = {}


def _parse(value: object) -> timedelta:
    if isinstance(value, timedelta):
        return value
    if isinstance(value, bool):
        raise _invalid(value, "a bool is not a duration")
    if isinstance(value, int | float):
        if not math.isfinite(value):
            raise _invalid(value, "it is not a finite number")
        return timedelta(seconds=value)
    if isinstance(value, str):
        return _parse_text(value)
    raise _invalid(value, "expected a timedelta, a number of seconds or a string")


#: A bare number, as text.
_NUMBER = re.compile(r"\d+(?:\.\d+)?", re.ASCII)


@functools.lru_cache(maxsize=512)
def _parse_text(value: str) -> timedelta:
    """A duration string: the same few (settings, decorators) come back on every run."""
    text = value.strip()
    if text == "0":  # zero needs no unit ("0 retries at once"); "5" stays ambiguous
        return timedelta(0)
    if not _WHOLE.fullmatch(text):
        if text.startswith("-") and _WHOLE.fullmatch(text[1:].strip()):
            raise _invalid(value, "it is negative")
        if _NUMBER.fullmatch(text):  # "5": seconds? minutes? (a number, not a str, is seconds)
            raise _invalid(value, f'a number in a string needs a unit: "{text}s" for seconds')
        raise _invalid(
            value, 'write a number with a unit, e.g. "250ms", "30s", "5m", "1h30m", "3d", "1w"'
        )
    total = timedelta(0)
    for number, unit in _PART.findall(text):
        total += _UNITS[unit] * float(number)
    return total


def after(start: datetime, duration: timedelta, value: object = None) -> datetime:
    """``start + duration``, or ``InvalidDuration`` naming ``value`` (the duration as the
    user wrote it) when that lies beyond the calendar (year 9999).

    >>> after(datetime(2026, 1, 1), timedelta(days=1))
    datetime.datetime(2026, 1, 2, 0, 0)
    """
    try:
        return start + duration
    except OverflowError:
        raise _invalid(
            duration if value is None else value, "it ends after the year 9999"
        ) from None


def before(start: datetime, duration: timedelta, value: object = None) -> datetime:
    """``start - duration``, or ``InvalidDuration`` when that lies before the year 1."""
    try:
        return start - duration
    except OverflowError:
        raise _invalid(
            duration if value is None else value, "it reaches before the year 1"
        ) from None


def format_duration(value: timedelta) -> str:
    """The compact form of a ``timedelta``, e.g. ``"1h30m"``; inverse of the parser."""
    micros = value // timedelta(microseconds=1)
    if micros == 0:
        return "0s"
    parts = []
    for unit, size in (
        ("w", 604_800_000_000),
        ("d", 86_400_000_000),
        ("h", 3_600_000_000),
        ("m", 60_000_000),
        ("s", 1_000_000),
        ("ms", 1_000),
    ):
        count, micros = divmod(micros, size)
        if count:
            parts.append(f"{count}{unit}")
    if micros:
        parts.append(f"{micros / 1000:g}ms")
    return "".join(parts)


def _invalid(value: object, why: str) -> InvalidDuration:
    return InvalidDuration(f"invalid duration {value!r}: {why}")
