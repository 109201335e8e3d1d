"""The parameters of the statements the ORM's dialects run by hand
(``Dialect.execute_fenced``: a fenced step write, an outcome), written once with
numbered placeholders (``$1``) for every database."""

from __future__ import annotations

import re
from typing import Any

from django.db.models import CharField, IntegerField, TextField

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
    """``field.get_db_prep_save(value)``, without asking Django for the values it returns
    unchanged on any database: None (SQL NULL, JSON's included), a ``str`` for a text
    column, an ``int`` for an integer one."""
    if value is None:
        return value
    kinds = _AS_IS.get(field)
    if kinds is None:
        kinds = _AS_IS[field] = _as_is(field)
    if type(value) in kinds:
        return value
    return field.get_db_prep_save(value, connection)


def _as_is(field: Any) -> tuple[type, ...]:
    if isinstance(field, (CharField, TextField)):
        return (str,)
    if isinstance(field, IntegerField):
        return (int,)
    return ()


#: field -> the exact types ``prepared`` sends as they are.
_AS_IS: dict[Any, tuple[type, ...]] = {}
