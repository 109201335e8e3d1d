"""The parameters of the hand-written statements on SQLite and MySQL/MariaDB
(``params.prepared``) are what Django's ``get_db_prep_save`` makes of each value, on
the database of this run, for every field of a run and a step record: the shortcuts
that skip Django's calls must not change what is written."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta, timezone
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from django.db import connection
from django.db.models import JSONField

from django_durable_jobs.db.params import prepared
from django_durable_jobs.models import JobRun, StepRecord

pytestmark = pytest.mark.django_db

INSTANT = datetime(2026, 12, 7, 9, 30, 1, 250, tzinfo=UTC)
RUN_ID = uuid.UUID("0b7e6d8a-3c1f-4d2e-9a8b-7c6d5e4f3a2b")

VALUES: list[Any] = [
    "text ✉ ünï",
    "",
    7,
    0,
    True,
    INSTANT,
    INSTANT.replace(microsecond=0),  # str() writes no fraction then
    INSTANT.astimezone(timezone(timedelta(hours=5, minutes=30))),
    INSTANT.astimezone(ZoneInfo("Europe/Paris")),
    RUN_ID,
    str(RUN_ID),
    RUN_ID.hex,
    str(RUN_ID).upper(),
    "not-a-uuid",
    timedelta(minutes=5),
]


def outcome(convert: Any, field: Any, value: Any) -> tuple[str, Any]:
    """What ``convert`` returns for ``value``, or the type of what it raises: the same
    error either way is what matters."""
    try:
        return "value", convert(field, value, connection)
    except Exception as exc:
        return "error", type(exc)


def django(field: Any, value: Any, connection: Any) -> Any:
    return field.get_db_prep_save(value, connection)


@pytest.mark.parametrize("use_tz", [True, False], ids=["aware", "use_tz_false"])
def test_each_parameter_is_what_django_would_send(use_tz: bool, settings: Any) -> None:
    settings.USE_TZ = use_tz
    fields = [
        field
        for model in (JobRun, StepRecord)
        for field in model._meta.concrete_fields
        if not isinstance(field, JSONField)  # always through Django
    ]
    compared = 0
    for field in fields:
        for value in [None, *VALUES]:
            expected = outcome(django, field, value)
            got = outcome(prepared, field, value)
            assert got == expected, (field.name, value)
            if expected[0] == "value":
                # The same type too, but for the integer wrappers Django makes for
                # psycopg (an int subclass), which PostgreSQL's own statements skip.
                if connection.vendor != "postgresql":
                    assert type(got[1]) is type(expected[1]), (field.name, value)
                compared += 1
    assert compared > len(fields) * 5


def test_a_run_id_written_again_is_the_same_text() -> None:
    """``_hex`` keeps the ids it parsed: the second write of a run's id is the same."""
    field = StepRecord._meta.get_field("run")
    first = prepared(field, str(RUN_ID), connection)
    assert prepared(field, str(RUN_ID), connection) == first
    assert first == field.get_db_prep_save(str(RUN_ID), connection)
