"""The parameters of the statements the ORM's dialects run by hand
(``Dialect.execute_fenced``: a fenced step write, an outcome), written once with
numbered placeholders (``$1``) for every database."""

from __future__ import annotations

import re
import uuid
from datetime import UTC, datetime
from functools import lru_cache
from typing import Any

from django.db.models import (
    CharField,
    DateTimeField,
    IntegerField,
    TextField,
    UUIDField,
)
from django.db.models.fields import AutoFieldMixin

#: A numbered placeholder (``$1``) of the statements written for ``execute_fenced``.
_PLACEHOLDER = re.compile(r"\$(\d+)")


def numbered(sql: str) -> tuple[str, list[int]]:
    """``sql`` with ``%s`` for its ``$1``... placeholders, and the parameters' indexes in
    the order the placeholders stand; once per statement (a step write's every time
    was 7 % of a ten-step run's worker CPU on SQLite)."""
    if sql not in _NUMBERED:
        order = [int(number) - 1 for number in _PLACEHOLDER.findall(sql)]
        _NUMBERED[sql] = (_PLACEHOLDER.sub("%s", sql), order)
    return _NUMBERED[sql]


_NUMBERED: dict[str, tuple[str, list[int]]] = {}


def prepared(field: Any, value: Any, connection: Any) -> Any:
    """``field.get_db_prep_save(value)``, without Django's layers of calls where its
    answer is known: None (SQL NULL, JSON's included), a ``str`` for a text column and
    an ``int`` for an integer one as they are; on SQLite and MySQL/MariaDB with
    ``USE_TZ`` and the connection in UTC, a datetime in UTC as the naive text Django
    writes; where the database has no ``uuid`` type, a run's id (a ``UUID``, or the
    text the engine holds) as its 32 hex digits. A step write's parameters through
    Django were a seventh of a ten-step run's worker time on SQLite."""
    if value is None:
        return value
    kind = _KINDS.get(field)
    if kind is None:
        kind = _KINDS[field] = _kind(field)
    exact = type(value)
    if exact in kind:
        return value
    if exact is datetime and _INSTANT in kind and value.tzinfo is UTC and _naive_utc(connection):
        return str(value.replace(tzinfo=None))  # adapt_datetimefield_value's text
    if (
        _UUID in kind
        and (exact is str or exact is uuid.UUID)
        and not connection.features.has_native_uuid_field
    ):
        try:
            return _hex(value)
        except ValueError:  # malformed: Django says so in its own words
            pass
    return field.get_db_prep_save(value, connection)


def _kind(field: Any) -> tuple[Any, ...]:
    """The exact types ``prepared`` passes as they are for ``field``, and whether its
    values are instants or UUIDs (a foreign key's: its target's)."""
    target = field.target_field if field.is_relation else field
    if isinstance(field, (CharField, TextField)):
        return (str,)
    if isinstance(field, IntegerField) and not isinstance(field, AutoFieldMixin):
        return (int,)  # an auto field refuses 0 on MySQL
    if isinstance(target, DateTimeField):
        return (_INSTANT,)
    if isinstance(target, UUIDField):
        return (_UUID,)
    return ()


#: Markers in a field's kind (never the type of a value).
_INSTANT, _UUID = object(), object()
#: field -> ``_kind(field)``.
_KINDS: dict[Any, tuple[Any, ...]] = {}
#: The vendors whose ``adapt_datetimefield_value`` writes an aware value as
#: ``str(make_naive(value, connection.timezone))``.
_NAIVE_TEXT = frozenset({"sqlite", "mysql"})


def _naive_utc(connection: Any) -> bool:
    # ``timezone`` is None without USE_TZ (Django clears it when the setting changes).
    return connection.timezone is UTC and connection.vendor in _NAIVE_TEXT


@lru_cache(maxsize=4096)
def _hex(value: str | uuid.UUID) -> str:
    """What ``UUIDField.get_db_prep_value`` returns without a ``uuid`` type; each of a
    run's steps writes the same id, once parsed."""
    return value.hex if isinstance(value, uuid.UUID) else uuid.UUID(value).hex
