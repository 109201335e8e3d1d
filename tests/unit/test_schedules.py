"""Cron expressions and schedule options are validated when the job is declared, with a
clear error."""

from __future__ import annotations

import re

import pytest

from django_durable_jobs import Cron, job
from django_durable_jobs.exceptions import InvalidSchedule


@pytest.mark.parametrize(
    ("expr", "message"),
    [
        ("* * * *", "has 4 field(s); write 5"),
        ("* * * * * *", "has 6 field(s)"),
        ("61 * * * *", "Bad minute"),
        ("0 25 * * *", "Bad hour"),
        ("0 9 * * mON", None),  # names are case-insensitive: valid
        ("0 0 30 2 *", "Bad day-of-month"),  # February never has a 30th
        ("every day", "has 2 field(s)"),
        ("", "has 0 field(s)"),
    ],
)
def test_cron_expressions_are_validated_with_a_clear_error(expr: str, message: str | None) -> None:
    if message is None:
        assert Cron(expr).expr == expr
        return
    with pytest.raises(InvalidSchedule, match=re.escape(message)) as caught:
        Cron(expr)
    assert caught.value.code == "X_SCHEDULE_INVALID"
    assert repr(expr) in str(caught.value)


def test_time_zone_and_cron_option_are_validated_at_import_time() -> None:
    with pytest.raises(InvalidSchedule, match="unknown time zone 'Europe/Pariss'"):
        Cron("0 9 * * *", timezone="Europe/Pariss")
    with pytest.raises(InvalidSchedule, match="must be a string, a Cron or a list"):
        job(name="tests.bad-cron", cron=[9])(lambda ctx: None)  # type: ignore[list-item]
