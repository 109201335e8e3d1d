"""The retry policy: how many attempts, and how long to wait before the next one."""

from __future__ import annotations

import random
from collections.abc import Callable
from datetime import timedelta

from .durations import Duration, parse_duration

#: ``@job(backoff=...)``: a duration (the base of exponential backoff) or a function
#: of the attempt number that returns the delay itself.
Backoff = Duration | Callable[[int], Duration]


def backoff_delay(
    backoff: Backoff,
    attempt: int,
    *,
    cap: timedelta,
    rng: random.Random | None = None,
) -> timedelta:
    """Delay before attempt ``attempt + 1``, after attempt ``attempt`` failed.

    A duration is the base of exponential backoff with "equal jitter": the delay
    lies between half and all of ``base * 2 ** (attempt - 1)``, capped at ``cap``.
    A callable gets the attempt number and returns the delay itself.

    >>> backoff_delay("1s", 3, cap=timedelta(hours=1), rng=random.Random(1)) <= timedelta(seconds=4)
    True
    """
    if callable(backoff):
        return parse_duration(backoff(attempt))
    base = parse_duration(backoff)
    if not base:
        return timedelta(0)
    ceiling: timedelta = min(base * 2 ** min(attempt - 1, 40), cap)
    jitter = rng.uniform(0.5, 1.0) if rng is not None else random.uniform(0.5, 1.0)
    return ceiling * jitter
