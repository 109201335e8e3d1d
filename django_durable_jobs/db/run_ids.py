"""Run ids as people type them: a whole UUID, or a unique prefix of at least six
characters (the admin and ``jobs list`` show the first eight)."""

from __future__ import annotations

import contextlib
import uuid

from .. import conf
from ..exceptions import RunNotFound
from ..models import JobRun

#: The fewest characters of a run id accepted as its prefix (the admin shows 8).
MIN_PREFIX = 6


def resolve(run_id: uuid.UUID | str) -> uuid.UUID:
    """A run's id from its UUID or a unique prefix of at least ``MIN_PREFIX`` characters."""
    if isinstance(run_id, uuid.UUID):
        return run_id
    text = str(run_id).strip().lower()
    digits = text.replace("-", "")
    if len(digits) == 32:
        with contextlib.suppress(ValueError):
            return uuid.UUID(text)
    if not digits or digits.strip("0123456789abcdef") or len(digits) > 32:
        raise RunNotFound(
            f"{run_id!r} is not a run id (a UUID, or its first {MIN_PREFIX} or more characters)"
        )
    if len(digits) < MIN_PREFIX:
        raise RunNotFound(
            f"run id prefix {run_id!r} is too short: give at least {MIN_PREFIX} characters"
        )
    return _by_prefix(digits, str(run_id))


def _by_prefix(digits: str, given: str) -> uuid.UUID:
    # In the UUID's canonical 8-4-4-4-12 form: Django compares that text on databases
    # with a native uuid type and drops the dashes on the others.
    dashed = "-".join(digits[a:b] for a, b in ((0, 8), (8, 12), (12, 16), (16, 20), (20, 32)))
    found = list(
        JobRun.objects.using(conf.database())
        .filter(id__startswith=dashed.rstrip("-"))
        .order_by("id")
        .values_list("id", flat=True)[:3]
    )
    if not found:
        raise RunNotFound(f"no run id starts with {given!r}")
    if len(found) > 1:
        shown = ", ".join(str(pk) for pk in found[:2]) + (", …" if len(found) > 2 else "")
        raise RunNotFound(
            f"run id prefix {given!r} is ambiguous: it matches {shown}; give more characters"
        )
    return found[0]
