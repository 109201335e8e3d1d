"""Strict JSON in and out, and errors turned into storable records.

Strict means what PostgreSQL's ``jsonb`` and a reader in any language accept: no
NaN or Infinity, no NUL character, and a size limit.
"""

from __future__ import annotations

import json
import math
import traceback as tb
from dataclasses import dataclass
from typing import Any

from .exceptions import DurableJobsError, InvalidPayload, PayloadTooLarge


class NotStorable(ValueError):
    """Why a value cannot be stored; the caller turns it into its own error code."""

    def __init__(self, reason: str, *, too_large: bool = False) -> None:
        super().__init__(reason)
        self.too_large = too_large


def dumps(value: Any, *, limit: int | None = None) -> str:
    """Encode ``value`` as compact strict JSON, or raise ``NotStorable`` saying why."""
    try:
        text = json.dumps(value, allow_nan=False, ensure_ascii=False, separators=(",", ":"))
    except ValueError as exc:  # NaN / Infinity / circular reference
        raise NotStorable(str(exc)) from exc
    except TypeError as exc:  # not a JSON type
        raise NotStorable(str(exc)) from exc
    if "\\u0000" in text and _has_nul(value):
        raise NotStorable("it contains a NUL character (\\x00)")
    if limit is not None:
        size = len(text.encode())
        if size > limit:
            raise NotStorable(f"it is {size} bytes, over the limit of {limit}", too_large=True)
    return text


def loads(text: str) -> Any:
    return json.loads(text)


def roundtrip(value: Any, *, limit: int | None = None) -> Any:
    """What a stored ``value`` reads back as (a tuple becomes a list, keys strings)."""
    return loads(dumps(value, limit=limit))


def check_payload(value: Any, *, what: str, limit: int) -> Any:
    """Validate arguments or an event payload; return the stored form.

    Raises ``InvalidPayload`` / ``PayloadTooLarge`` naming ``what``.
    """
    try:
        return roundtrip(value, limit=limit)
    except NotStorable as exc:
        if exc.too_large:
            raise PayloadTooLarge(f"{what} cannot be stored as JSON: {exc}") from None
        inside = culprit(value) or ""
        raise InvalidPayload(f"{what}{inside} cannot be stored as JSON: {exc}") from None


_SCALARS = (str, int, float, bool, type(None))


def culprit(value: Any, path: str = "", seen: frozenset[int] = frozenset()) -> str | None:
    """Where inside ``value`` the first part that strict JSON refuses is, as a subscript
    path (``"['items'][2]"``; ``""`` for ``value`` itself), or None if there is none."""
    if isinstance(value, str):
        return path if "\x00" in value else None
    if isinstance(value, float):
        return None if math.isfinite(value) else path
    if isinstance(value, _SCALARS):
        return None
    if not isinstance(value, dict | list | tuple) or id(value) in seen:
        return path  # not a JSON type, or a circular reference
    seen = seen | {id(value)}
    items = value.items() if isinstance(value, dict) else enumerate(value)
    for key, item in items:
        if isinstance(value, dict) and (culprit(key) is not None or isinstance(key, tuple)):
            return f"{path}[{key!r}]"
        if (found := culprit(item, f"{path}[{key!r}]", seen)) is not None:
            return found
    return None


def _has_nul(value: Any) -> bool:
    if isinstance(value, str):
        return "\x00" in value
    if isinstance(value, dict):
        return any(_has_nul(k) or _has_nul(v) for k, v in value.items())
    if isinstance(value, list | tuple):
        return any(_has_nul(v) for v in value)
    return False


@dataclass(frozen=True, kw_only=True)
class ErrorInfo:
    """A failure as stored on a step or a run."""

    type: str
    message: str
    traceback: str
    code: str = ""

    @classmethod
    def of(cls, exc: BaseException) -> ErrorInfo:
        return cls(
            type=f"{type(exc).__module__}.{type(exc).__qualname__}",
            message=str(exc),
            traceback="".join(tb.format_exception(exc)),
            # Only our codes are stable; another library's ``.code`` (SystemExit's int,
            # ValidationError's None) is not an error code.
            code=exc.code if isinstance(exc, DurableJobsError) else "",
        )

    def as_dict(self) -> dict[str, str]:
        return {
            "type": self.type,
            "message": self.message,
            "traceback": self.traceback,
            "code": self.code,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ErrorInfo:
        return cls(
            type=str(data.get("type", "")),
            message=str(data.get("message", "")),
            traceback=str(data.get("traceback", "")),
            code=str(data.get("code", "")),
        )
