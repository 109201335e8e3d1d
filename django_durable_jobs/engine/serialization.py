"""Strict JSON in and out, and errors turned into storable records.

Strict means what PostgreSQL's ``jsonb``, MariaDB's ``JSON`` and a reader in any
language accept: no NaN or Infinity, no NUL character, no lone surrogate, at most
``MAX_DEPTH`` levels of nesting, and a size limit.
"""

from __future__ import annotations

import json
import math
import traceback as tb
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from ..exceptions import DurableJobsError, InvalidPayload, PayloadTooLarge

#: How deeply a stored value may nest. MariaDB's JSON columns refuse 32 levels, and a
#: value stored as one of a run's arguments gains a level; far deeper values would also
#: make the worker's decoder hit Python's recursion limit.
MAX_DEPTH = 30


class NotStorable(ValueError):
    """Why a value cannot be stored; the caller turns it into its own error code."""

    def __init__(self, reason: str, *, too_large: bool = False) -> None:
        super().__init__(reason)
        self.too_large = too_large


def dumps(value: Any, *, limit: int | None = None, max_depth: int = MAX_DEPTH) -> str:
    """Encode ``value`` as compact strict JSON, or raise ``NotStorable`` saying why."""
    text, size = _encode(value, max_depth)
    if limit is not None and size > limit:
        raise NotStorable(f"it is {size} bytes, over the limit of {limit}", too_large=True)
    return text


def _encode(value: Any, max_depth: int) -> tuple[str, int]:
    """``value`` as strict JSON and its size in bytes (UTF-8), or ``NotStorable``."""
    too_deep = f"it is nested more than {max_depth} levels deep"
    try:
        text = _ENCODER.encode(value)
    except RecursionError as exc:  # nested deeper than the interpreter's stack allows
        raise NotStorable(too_deep) from exc
    except ValueError as exc:  # NaN / Infinity / circular reference
        raise NotStorable(str(exc)) from exc
    except TypeError as exc:  # not a JSON type
        raise NotStorable(str(exc)) from exc
    if "\\u0000" in text and _has_nul(value):
        raise NotStorable("it contains a NUL character (\\x00)")
    try:
        size = len(text.encode())
    except UnicodeEncodeError as exc:  # a lone surrogate: no database can store it
        raise NotStorable(
            f"it contains a lone surrogate ({text[exc.start]!r}), which is not valid Unicode"
        ) from None
    # Counting brackets is cheap and settles almost every value without a walk.
    if text.count("[") + text.count("{") > max_depth and _depth(value) > max_depth:
        raise NotStorable(too_deep)
    return text, size


def unstorable(text: str) -> str | None:
    """Why ``text`` cannot go into a text column of every database, or ``None``."""
    if "\x00" in text:
        return "it contains a NUL character (\\x00)"
    try:
        text.encode()
    except UnicodeEncodeError as exc:
        return f"it contains a lone surrogate ({text[exc.start]!r})"
    return None


def loads(text: str) -> Any:
    return json.loads(text)


def roundtrip(value: Any, *, limit: int | None = None, max_depth: int = MAX_DEPTH) -> Any:
    """What a stored ``value`` reads back as (a tuple becomes a list, keys strings).
    Two keys of one dict that become the same string (``1`` and ``"1"``) would lose a
    value without a word: ``NotStorable``."""
    # Most jobs return None: no encoding for the constants (at most 5 bytes: "false").
    if (value is None or value is True or value is False) and (limit is None or limit >= 5):
        return value
    return _DECODER.decode(dumps(value, limit=limit, max_depth=max_depth))


def _object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A decoded JSON object, unless two of its keys were one: JSON's keys are strings,
    and ``json.dumps`` writes ``1``, ``1.0``, ``True`` and ``None`` as ``"1"``,
    ``"1.0"``, ``"true"`` and ``"null"``."""
    decoded = dict(pairs)
    if len(decoded) < len(pairs):
        seen: set[str] = set()
        twice = next(key for key, _ in pairs if key in seen or seen.add(key))  # type: ignore[func-returns-value]
        raise NotStorable(
            f"two of a dict's keys become the same JSON key {twice!r} (JSON's keys are "
            "strings: 1 and '1' are one key there)"
        )
    return decoded


#: ``json.dumps`` and ``json.loads`` given options build an encoder or a decoder on every
#: call; these are built once (strict, compact, UTF-8; merged keys refused).
_ENCODER = json.JSONEncoder(allow_nan=False, ensure_ascii=False, separators=(",", ":"))
_DECODER = json.JSONDecoder(object_pairs_hook=_object)


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


class Arguments(NamedTuple):
    """A call's arguments in their stored form (a tuple made a list, keys strings), and
    each as the JSON text that stores it: encoded once, the insert sends this text. A
    named tuple: built once a run, it costs a third of a frozen dataclass."""

    args: list[Any]
    kwargs: dict[str, Any]
    args_json: str
    kwargs_json: str


def check_arguments_payload(
    prefix: str, args: Sequence[Any], kwargs: Mapping[str, Any], *, limit: int
) -> tuple[list[Any], dict[str, Any]]:
    """Positional and keyword arguments in their stored form (``encode_arguments``)."""
    checked = encode_arguments(prefix, args, kwargs, limit=limit)
    return checked.args, checked.kwargs


def encode_arguments(
    prefix: str, args: Sequence[Any], kwargs: Mapping[str, Any], *, limit: int
) -> Arguments:
    """Positional and keyword arguments in their stored form and as JSON text, one
    encoding each when they are storable; otherwise the first one that is not is named
    with the path inside it (``job 'x': argument 0['items'][2] cannot be stored as
    JSON``, ``argument 'user'``). Their size together (as ``[args,kwargs]``) is limited
    by ``limit``.

    ``prefix`` starts each message: ``"job 'shop.sync': "``, ``"task 'shop.tasks.x': "``.

    >>> encode_arguments("job 'x': ", (1, "é"), {}, limit=100).args_json
    '[1,"é"]'
    """
    try:  # the common case: each encoded once; the slow path only names the culprit
        # One level of wrapping each (as [args,kwargs] has two): an argument may still
        # nest MAX_DEPTH levels. No arguments, the usual case, need no encoding.
        args_json, args_size = _encode(list(args), MAX_DEPTH + 1) if args else ("[]", 2)
        kwargs_json, kwargs_size = _encode(dict(kwargs), MAX_DEPTH + 1) if kwargs else ("{}", 2)
        size = args_size + kwargs_size + 3  # "[", "," and "]"
        if size > limit:
            raise NotStorable(f"it is {size} bytes, over the limit of {limit}", too_large=True)
        clean_args = _DECODER.decode(args_json) if args else []
        clean_kwargs = _DECODER.decode(kwargs_json) if kwargs else {}
    except NotStorable:
        _refuse(prefix, args, kwargs, limit)
        raise AssertionError("unreachable: the arguments failed to encode once") from None
    return Arguments(clean_args, clean_kwargs, args_json, kwargs_json)


def _refuse(prefix: str, args: Sequence[Any], kwargs: Mapping[str, Any], limit: int) -> None:
    """Raise ``InvalidPayload`` or ``PayloadTooLarge`` for arguments that cannot be
    stored, naming the first one that is not storable."""
    for index, value in enumerate(args):
        check_payload(value, what=f"{prefix}argument {index}", limit=limit)
    for name, value in kwargs.items():
        check_payload(value, what=f"{prefix}argument {name!r}", limit=limit)
    # Each is storable on its own: together they are too large (or refused as a whole).
    try:
        roundtrip([list(args), dict(kwargs)], limit=limit, max_depth=MAX_DEPTH + 2)
    except NotStorable as exc:
        error = PayloadTooLarge if exc.too_large else InvalidPayload
        raise error(f"{prefix}the arguments cannot be stored as JSON: {exc}") from None


_SCALARS = (str, int, float, bool, type(None))


def culprit(
    value: Any, path: str = "", seen: frozenset[int] = frozenset(), depth: int = 0
) -> str | None:
    """Where inside ``value`` the first part that strict JSON refuses is, as a subscript
    path (``"['items'][2]"``; ``""`` for ``value`` itself), or None if there is none.

    Past ``MAX_DEPTH`` levels the value itself is the culprit: the walk stops there
    instead of recursing as deep as the value goes."""
    if isinstance(value, str):
        return path if unstorable(value) is not None else None
    if isinstance(value, float):
        return None if math.isfinite(value) else path
    if isinstance(value, _SCALARS):
        return None
    if not isinstance(value, dict | list | tuple) or id(value) in seen or depth >= MAX_DEPTH:
        return path  # not a JSON type, a circular reference, or nested too deep
    seen = seen | {id(value)}
    items = value.items() if isinstance(value, dict) else enumerate(value)
    for key, item in items:
        if isinstance(value, dict) and (culprit(key) is not None or isinstance(key, tuple)):
            return f"{path}[{key!r}]"
        if (found := culprit(item, f"{path}[{key!r}]", seen, depth + 1)) is not None:
            return found
    return None


def _depth(value: Any) -> int:
    """How many levels of lists and dicts ``value`` nests (a scalar is 0); no recursion."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        current, level = stack.pop()
        deepest = max(deepest, level)
        items = current.values() if isinstance(current, dict) else current
        stack.extend((item, level + 1) for item in items if isinstance(item, list | tuple | dict))
    return deepest if isinstance(value, list | tuple | dict) else 0


def _has_nul(value: Any) -> bool:
    if isinstance(value, str):
        return "\x00" in value
    if isinstance(value, dict):
        return any(_has_nul(k) or _has_nul(v) for k, v in value.items())
    if isinstance(value, list | tuple):
        return any(_has_nul(v) for v in value)
    return False


#: The widest error type a run or a step row holds (``error_type`` columns).
MAX_ERROR_TYPE = 200
#: The longest error message and traceback stored (and logged), in characters.
MAX_ERROR_MESSAGE = 20_000
MAX_TRACEBACK = 50_000


def cut(text: str, limit: int) -> str:
    """``text``, or its first three quarters of ``limit`` characters and its last
    quarter (a traceback's last line names the error) with how much was left out.

    >>> cut("a" * 30 + "z", 20).splitlines()
    ['aaaaaaaaaaaaaaa', '[... 11 characters cut ...]', 'aaaaz']
    """
    if len(text) <= limit:
        return text
    head, tail = limit * 3 // 4, limit // 4
    return f"{text[:head]}\n[... {len(text) - head - tail} characters cut ...]\n{text[-tail:]}"


def storable_text(text: str) -> str:
    """``text`` as every database stores it: NUL (refused by PostgreSQL) and lone
    surrogates (not UTF-8) written as backslash escapes; everything else unchanged."""
    if "\x00" in text:
        text = text.replace("\x00", "\\x00")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text


def ascii_text(text: str, limit: int) -> str:
    """``text`` in printable-safe ASCII (non-ASCII as escapes), at most ``limit`` chars."""
    text = storable_text(text).encode("ascii", "backslashreplace").decode("ascii")
    return text if len(text) <= limit else text[: limit - 3] + "..."


def shown_type(error_type: str) -> str:
    """A stored error type as Python's traceback shows it: the bare class name for
    builtins (``ValueError``), the dotted path otherwise (``shop.errors.CardDeclined``)."""
    for module in ("builtins.", "__main__."):
        if error_type.startswith(module):
            return error_type.removeprefix(module)
    return error_type


def error_line(error_type: str, message: str, *, code: str = "") -> str:
    """A failure on one line, everywhere it is shown (CLI, admin, testing, logs): our
    code (``X_JOB_TIMEOUT``) or the exception's type, a colon, the message, as the last
    line of a traceback reads.

    >>> error_line("builtins.ValueError", "card declined")
    'ValueError: card declined'
    """
    kind = code or shown_type(error_type)
    return f"{kind}: {message}" if kind and message else kind or message


def _message(exc: BaseException) -> str:
    try:
        return str(exc)
    except Exception as problem:  # a __str__ that raises must not lose the failure
        return f"<unprintable {type(exc).__name__}: {type(problem).__name__}>"


def _traceback(exc: BaseException) -> str:
    try:
        return "".join(tb.format_exception(exc))
    except Exception as problem:
        return f"<no traceback: {type(problem).__name__}>"


@dataclass(frozen=True, kw_only=True)
class ErrorInfo:
    """A failure as stored on a step or a run."""

    type: str
    message: str
    traceback: str
    code: str = ""

    @classmethod
    def of(cls, exc: BaseException) -> ErrorInfo:
        """The failure as stored: texts made storable (an error message may carry
        any character, a NUL included), the type cut to its column, the message and
        the traceback cut to ``MAX_ERROR_MESSAGE`` and ``MAX_TRACEBACK`` characters (an
        HTTP error that carries a response body of megabytes was stored four times
        over, a run's and its step's message and traceback, and logged whole)."""
        kind = storable_text(f"{type(exc).__module__}.{type(exc).__qualname__}")
        return cls(
            type=kind if len(kind) <= MAX_ERROR_TYPE else kind[: MAX_ERROR_TYPE - 3] + "...",
            message=storable_text(cut(_message(exc), MAX_ERROR_MESSAGE)),
            traceback=storable_text(cut(_traceback(exc), MAX_TRACEBACK)),
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
