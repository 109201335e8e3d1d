"""Durations: the accepted forms, the rejected ones, and the formatter."""

from __future__ import annotations

from datetime import timedelta

import pytest

from django_durable_jobs.engine.durations import format_duration, parse_duration
from django_durable_jobs.exceptions import DurableJobsError, InvalidDuration


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        # timedelta: returned as is
        (timedelta(0), timedelta(0)),
        (timedelta(minutes=5, microseconds=7), timedelta(minutes=5, microseconds=7)),
        # a number of seconds
        (0, timedelta(0)),
        (30, timedelta(seconds=30)),
        (86_400, timedelta(days=1)),
        (2.5, timedelta(seconds=2, microseconds=500_000)),
        (0.25, timedelta(milliseconds=250)),
        # strings with one unit
        ("250ms", timedelta(milliseconds=250)),
        ("30s", timedelta(seconds=30)),
        ("5m", timedelta(minutes=5)),
        ("2h", timedelta(hours=2)),
        ("3d", timedelta(days=3)),
        ("1w", timedelta(weeks=1)),
        ("0s", timedelta(0)),
        # combined units
        ("1h30m", timedelta(hours=1, minutes=30)),
        ("5m30s", timedelta(minutes=5, seconds=30)),
        (
            "1w2d3h4m5s6ms",
            timedelta(weeks=1, days=2, hours=3, minutes=4, seconds=5, milliseconds=6),
        ),
        # decimals
        ("1.5h", timedelta(hours=1, minutes=30)),
        ("0.5s", timedelta(milliseconds=500)),
        ("2.25m", timedelta(minutes=2, seconds=15)),
        ("1.5ms", timedelta(microseconds=1500)),
        ("0.5d", timedelta(hours=12)),
        ("1.5w", timedelta(days=10, hours=12)),
    ],
)
def test_accepted_forms(value: object, expected: timedelta) -> None:
    result = parse_duration(value)
    assert result == expected
    assert type(result) is timedelta


def test_ms_is_milliseconds_not_minutes_then_seconds() -> None:
    assert parse_duration("5ms") == timedelta(milliseconds=5)
    assert parse_duration("5m5s") == timedelta(minutes=5, seconds=5)


@pytest.mark.parametrize(
    "value",
    [
        # negative
        -1,
        -0.5,
        timedelta(seconds=-1),
        timedelta(microseconds=-1),
        "-5m",
        # not finite
        float("nan"),
        float("inf"),
        float("-inf"),
        # strings that are not "<number><unit>..."
        "5 mins",
        "5 m",
        "",
        "   ",
        "5",
        "5x",
        "m5",
        "5M",
        "1e3s",
        ".5s",
        "1.s",
        "1h 30m",
        "5min",
        "nan s",
        "infs",
        # digits outside ASCII: float() would read them, a duration must not
        "\u0665m",  # ARABIC-INDIC DIGIT FIVE
        "\uff15m",  # FULLWIDTH DIGIT FIVE
        # not a duration type
        True,
        False,
        None,
        [5],
        ["5m"],
        {"seconds": 5},
        (5,),
        b"5m",
        object,
        # overflow: more than timedelta holds
        "99999999999w",
        "999999999d999999999d",
        1e20,
        10**20,
        "1" * 400 + "s",
    ],
)
def test_rejected_forms(value: object) -> None:
    with pytest.raises(InvalidDuration) as excinfo:
        parse_duration(value)
    error = excinfo.value
    assert error.code == "X_DURATION_INVALID"
    assert isinstance(error, DurableJobsError)
    assert repr(value) in str(error)  # the message names the offending value


def test_rejection_says_what_to_write() -> None:
    with pytest.raises(InvalidDuration, match=r'"30s"'):
        parse_duration("5 mins")
    # "-5s" is a number with a unit: what is wrong is its sign; "5" lacks the unit.
    with pytest.raises(InvalidDuration, match=r"'-5s': it is negative$"):
        parse_duration("-5s")
    with pytest.raises(
        InvalidDuration, match=r'\'2.5\': a number in a string needs a unit: "2.5s"'
    ):
        parse_duration("2.5")


def test_overflow_is_not_a_bare_overflow_error() -> None:
    # OverflowError / ValueError from timedelta must come out as InvalidDuration.
    with pytest.raises(InvalidDuration, match="too large"):
        parse_duration("99999999999w")
    with pytest.raises(InvalidDuration, match="too large"):
        parse_duration(1e20)


def test_invalid_duration_is_a_value_error() -> None:
    # Callers that validate with ``except ValueError`` keep working.
    with pytest.raises(ValueError, match="5 mins"):
        parse_duration("5 mins")


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (timedelta(0), "0s"),
        (timedelta(milliseconds=250), "250ms"),
        (timedelta(seconds=30), "30s"),
        (timedelta(minutes=5), "5m"),
        (timedelta(hours=1, minutes=30), "1h30m"),
        (timedelta(days=3), "3d"),
        (timedelta(weeks=1), "1w"),
        (timedelta(weeks=2, days=1, seconds=1), "2w1d1s"),
    ],
)
def test_format_duration_compact_form(value: timedelta, text: str) -> None:
    assert format_duration(value) == text


@pytest.mark.parametrize(
    "value",
    [
        timedelta(0),
        timedelta(microseconds=1),
        timedelta(microseconds=1500),
        timedelta(milliseconds=999, microseconds=999),
        timedelta(seconds=59, microseconds=123_456),
        timedelta(hours=1, minutes=30),
        timedelta(days=10, seconds=1, microseconds=123_456),
        timedelta(weeks=52, days=6, hours=23, minutes=59, seconds=59),
        timedelta.max,
    ],
)
def test_format_then_parse_round_trips(value: timedelta) -> None:
    assert parse_duration(format_duration(value)) == value


def test_a_bare_zero_string_is_zero_as_the_backoff_docs_say() -> None:
    from django_durable_jobs import job
    from django_durable_jobs.definitions.registry import unregister

    assert parse_duration("0") == parse_duration(" 0 ") == timedelta(0)
    try:
        definition = job(name="tests.zero_backoff", backoff="0")(lambda ctx: None)
        assert definition.backoff == "0"
    finally:
        unregister("tests.zero_backoff")
    with pytest.raises(ValueError, match="longer than zero"):  # a zero timeout stays a mistake
        job(name="tests.zero_timeout", timeout="0")(lambda ctx: None)


def test_text_is_parsed_once_and_a_rejected_text_stays_rejected() -> None:
    from django_durable_jobs.engine import durations

    assert parse_duration("17m3s") is parse_duration("17m3s")  # the kept timedelta
    for _ in range(2):  # a refusal is not remembered as anything
        with pytest.raises(InvalidDuration, match="5 mins"):
            parse_duration("5 mins")
    for number in range(1500):  # text from users: the memory stays bounded
        parse_duration(f"{number}s")
    assert len(durations._PARSED) <= 1024
    assert parse_duration("1499s") == timedelta(seconds=1499)  # past the bound: parsed
