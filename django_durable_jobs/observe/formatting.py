"""How the trace shows times, durations and JSON to people (admin and terminal)."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, tzinfo
from typing import Any

from django.utils import timezone

#: Outputs longer than this (as pretty JSON) are cut in the admin and the terminal.
JSON_LIMIT = 20_000
#: JSON up to this long on one line stays on one line (``[1]``, ``{"user_id": 42}``).
JSON_INLINE = 60


def short_duration(value: timedelta) -> str:
    """A duration for people, at most two units: ``"250ms"``, ``"1.5s"``, ``"3m20s"``,
    ``"1h30m"``, ``"3d4h"``."""
    seconds = value.total_seconds()
    if seconds < 0:
        return "-" + short_duration(-value)
    if seconds < 1:
        return f"{round(seconds * 1000)}ms"
    if seconds < 10:
        return f"{seconds:.1f}s".replace(".0s", "s")
    whole = round(seconds)
    for big, big_size, small, small_size in (
        ("d", 86_400, "h", 3_600),
        ("h", 3_600, "m", 60),
        ("m", 60, "s", 1),
    ):
        if whole >= big_size:
            count, rest = divmod(whole, big_size)
            part = rest // small_size
            return f"{count}{big}{part}{small}" if part else f"{count}{big}"
    return f"{whole}s"


def stamp(when: datetime | None, zone: tzinfo | None = None) -> str:
    """Every time the terminal shows (``jobs list``, ``show``, ``workers``,
    ``schedules``): ``2026-12-05 23:03:00``, to the second, in the current time zone
    (``TIME_ZONE``) or in ``zone`` (a schedule's, shown beside it); ``""`` for none.
    ``--json`` gives ISO 8601 instead."""
    if when is None:
        return ""
    return timezone.localtime(when, zone).strftime("%Y-%m-%d %H:%M:%S")


def pretty_json(value: Any, *, limit: int = JSON_LIMIT) -> str:
    """JSON on one line when that is short (``[1]``), else indented; cut after ``limit``
    characters (the caller escapes it)."""
    text = json.dumps(value, ensure_ascii=False)
    if len(text) <= JSON_INLINE:
        return text
    text = json.dumps(value, indent=2, ensure_ascii=False, sort_keys=False)
    if len(text) > limit:
        text = f"{text[:limit]}\n… ({len(text) - limit} more characters)"
    return text


def clip(text: str, most: int) -> str:
    """``text`` on one line, cut to ``most`` characters."""
    text = " ".join(text.split())
    return text if len(text) <= most else text[: most - 1] + "…"
