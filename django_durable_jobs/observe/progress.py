"""How a run's progress (``ctx.set_progress``, ``JobRun.progress``) is shown: a bar when
the value says how much of how much (``{"done": 40, "total": 100}``), the JSON
otherwise. One reading for the admin and ``manage.py jobs``."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from .trace import clip


@dataclass(frozen=True)
class Bar:
    done: float
    total: float

    @property
    def percent(self) -> int:
        """Whole percents, never 100 before ``done`` reaches ``total``."""
        share = min(self.done / self.total, 1.0)
        return int(share * 100)

    @property
    def text(self) -> str:
        return f"{_number(self.done)} of {_number(self.total)} ({self.percent}%)"


def bar(value: Any) -> Bar | None:
    """The bar of a progress value with numbers ``done`` (at least 0) and ``total``
    (more than 0); None for any other value."""
    if not isinstance(value, dict):
        return None
    done, total = value.get("done"), value.get("total")
    if not (isinstance(done, int | float) and isinstance(total, int | float)):
        return None
    if isinstance(done, bool) or isinstance(total, bool) or total <= 0 or done < 0:
        return None
    return Bar(float(done), float(total))


def progress_text(value: Any, width: int = 80) -> str:
    """One line: the bar's words, or the JSON clipped to ``width``; "" for none."""
    if value is None:
        return ""
    found = bar(value)
    if found is not None:
        return found.text
    return clip(json.dumps(value, ensure_ascii=False), width)


def _number(value: float) -> str:
    return str(int(value)) if value == int(value) else f"{value:g}"
