"""Strict JSON (no NaN, no NUL, a size limit) and errors turned into storable records."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest
from django.core.exceptions import ValidationError

from django_durable_jobs.engine.serialization import (
    ErrorInfo,
    NotStorable,
    check_payload,
    dumps,
    error_line,
    roundtrip,
    shown_type,
)
from django_durable_jobs.exceptions import (
    DurableJobsError,
    InvalidPayload,
    PayloadTooLarge,
    StepDuplicateError,
)

BACKSLASH_U0000 = "\\u0000"  # the six characters \ u 0 0 0 0, not a NUL


# -- dumps / roundtrip ---------------------------------------------------------------


def test_dumps_is_compact_json() -> None:
    assert dumps({"a": [1, 2], "b": None}) == '{"a":[1,2],"b":null}'


def test_tuples_come_back_as_lists() -> None:
    value = {"pair": (1, 2), "nested": [(3, (4, 5))]}
    assert roundtrip(value) == {"pair": [1, 2], "nested": [[3, [4, 5]]]}
    assert type(roundtrip((1, 2))) is list


def test_roundtrip_keys_become_strings() -> None:
    assert roundtrip({1: "a", 2.5: "b", None: "c"}) == {"1": "a", "2.5": "b", "null": "c"}


def test_roundtrip_keeps_json_values() -> None:
    value = {"s": "héllo ✓", "i": -3, "f": 1.5, "t": True, "n": None, "l": [], "d": {}}
    assert roundtrip(value) == value


@pytest.mark.parametrize(
    "value",
    [
        float("nan"),
        float("inf"),
        float("-inf"),
        [1.0, float("nan")],
        {"x": float("inf")},
        {"deep": [{"deeper": float("-inf")}]},
        {float("nan"): 1},
    ],
)
def test_nan_and_infinity_are_rejected(value: Any) -> None:
    with pytest.raises(NotStorable) as excinfo:
        dumps(value)
    assert excinfo.value.too_large is False


@pytest.mark.parametrize(
    "value",
    [
        "a\x00b",
        ["ok", "a\x00b"],
        {"key": "a\x00b"},
        {"key\x00": "value"},
        {"outer": {"in\x00ner": 1}},
        [{"k": ("t", "\x00")}],
    ],
    ids=["str", "list", "dict-value", "dict-key", "nested-key", "tuple"],
)
def test_nul_character_is_rejected(value: Any) -> None:
    with pytest.raises(NotStorable, match="NUL"):
        dumps(value)


@pytest.mark.parametrize(
    "value",
    [
        BACKSLASH_U0000,
        [f"before {BACKSLASH_U0000} after"],
        {BACKSLASH_U0000: BACKSLASH_U0000},
    ],
)
def test_literal_backslash_u0000_text_is_accepted(value: Any) -> None:
    assert len(BACKSLASH_U0000) == 6
    assert roundtrip(value) == value


def test_literal_backslash_u0000_does_not_hide_a_real_nul() -> None:
    with pytest.raises(NotStorable, match="NUL"):
        dumps([BACKSLASH_U0000, "\x00"])


class _Thing:
    pass


@pytest.mark.parametrize(
    "value",
    [
        {1, 2},
        _Thing(),
        b"bytes",
        datetime(2024, 1, 1, tzinfo=UTC),
        {"when": datetime(2024, 1, 1, tzinfo=UTC)},
        [frozenset()],
        {(1, 2): "tuple key"},
    ],
    ids=["set", "object", "bytes", "datetime", "nested-datetime", "frozenset", "tuple-key"],
)
def test_non_json_types_are_rejected(value: Any) -> None:
    with pytest.raises(NotStorable) as excinfo:
        dumps(value)
    assert excinfo.value.too_large is False


def test_circular_reference_is_rejected() -> None:
    looped: list[Any] = []
    looped.append(looped)
    with pytest.raises(NotStorable, match=r"[Cc]ircular"):
        dumps(looped)


# -- the size limit ------------------------------------------------------------------


def test_exactly_at_the_limit_is_accepted() -> None:
    value = "x" * 10  # '"xxxxxxxxxx"': 12 bytes
    assert dumps(value, limit=12) == '"xxxxxxxxxx"'
    assert roundtrip(value, limit=12) == value


def test_one_byte_over_the_limit_is_rejected() -> None:
    with pytest.raises(NotStorable) as excinfo:
        dumps("x" * 10, limit=11)
    assert excinfo.value.too_large is True
    assert "12 bytes" in str(excinfo.value)
    assert "11" in str(excinfo.value)


def test_compact_separators_count_towards_the_limit() -> None:
    assert dumps([1, 2], limit=5) == "[1,2]"
    with pytest.raises(NotStorable):
        dumps([1, 2], limit=4)


def test_multibyte_characters_are_counted_in_bytes() -> None:
    # 2 characters, 4 bytes in UTF-8 ("é" is 2 bytes): '"éé"' is 6 bytes, 4 characters.
    assert dumps("éé", limit=6) == '"éé"'
    with pytest.raises(NotStorable) as excinfo:
        dumps("éé", limit=5)
    assert excinfo.value.too_large is True
    # "🎉" is 4 bytes: '"🎉"' is 6 bytes, 3 characters.
    assert roundtrip("🎉", limit=6) == "🎉"
    with pytest.raises(NotStorable):
        dumps("🎉", limit=5)


def test_no_limit_means_no_size_check() -> None:
    assert len(dumps("x" * 2_000_000)) == 2_000_002


# -- check_payload -------------------------------------------------------------------


def test_check_payload_returns_the_stored_form() -> None:
    assert check_payload({"ids": (1, 2)}, what="argument 'ids'", limit=100) == {"ids": [1, 2]}


@pytest.mark.parametrize(
    "value",
    [float("nan"), "a\x00", {"k\x00": 1}, {1, 2}, object(), b"x", datetime(2024, 1, 1)],
)
def test_check_payload_invalid_names_what(value: Any) -> None:
    with pytest.raises(InvalidPayload) as excinfo:
        check_payload(value, what="argument 'user'", limit=1000)
    error = excinfo.value
    assert type(error) is InvalidPayload
    assert error.code == "X_PAYLOAD_INVALID"
    assert "argument 'user'" in str(error)


def test_check_payload_too_large() -> None:
    with pytest.raises(PayloadTooLarge) as excinfo:
        check_payload({"blob": "x" * 100}, what="event 'order.paid' payload", limit=50)
    error = excinfo.value
    assert error.code == "X_PAYLOAD_TOO_LARGE"
    assert isinstance(error, InvalidPayload)
    assert isinstance(error, DurableJobsError)
    assert "event 'order.paid' payload" in str(error)
    assert "50" in str(error)


def test_check_payload_at_the_limit_is_fine() -> None:
    assert check_payload([1, 2], what="arguments", limit=5) == [1, 2]
    with pytest.raises(PayloadTooLarge):
        check_payload([1, 2], what="arguments", limit=4)


# -- ErrorInfo -----------------------------------------------------------------------


def _explode_with_value_error() -> None:
    raise ValueError("the flux capacitor is empty")


class _LocalError(Exception):
    pass


def _caught(fn: Any) -> BaseException:
    try:
        fn()
    except BaseException as exc:
        return exc
    raise AssertionError("expected an exception")


def test_error_info_of_a_builtin_error() -> None:
    info = ErrorInfo.of(_caught(_explode_with_value_error))
    assert info.type == "builtins.ValueError"
    assert info.message == "the flux capacitor is empty"
    assert "_explode_with_value_error" in info.traceback
    assert "ValueError: the flux capacitor is empty" in info.traceback
    assert info.code == ""


def test_error_info_type_is_module_and_qualname() -> None:
    def raise_local() -> None:
        raise _LocalError("local")

    class Nested(Exception):
        pass

    def raise_nested() -> None:
        raise Nested("nested")

    assert (
        ErrorInfo.of(_caught(raise_local)).type
        == "tests.unit.engine.test_serialization._LocalError"
    )
    assert ErrorInfo.of(_caught(raise_nested)).type == (
        "tests.unit.engine.test_serialization.test_error_info_type_is_module_and_qualname.<locals>.Nested"
    )


def _raise_duplicate() -> None:
    raise StepDuplicateError("step 'a' is used twice")


def test_error_info_keeps_the_code_of_our_errors() -> None:
    info = ErrorInfo.of(_caught(_raise_duplicate))
    assert info.code == "X_STEP_DUPLICATE"
    assert info.type == "django_durable_jobs.exceptions.StepDuplicateError"
    assert info.message == "step 'a' is used twice"
    assert "_raise_duplicate" in info.traceback


@pytest.mark.parametrize(
    "error",
    [SystemExit(3), ValidationError("bad value"), ValidationError("bad", code="invalid")],
    ids=["SystemExit", "ValidationError-no-code", "ValidationError-code"],
)
def test_error_info_ignores_unrelated_code_attributes(error: BaseException) -> None:
    # Only our errors carry a stable X_ code; another library's ``.code`` (an int, None
    # or its own vocabulary) must not end up as the run's error code.
    def raise_it() -> None:
        raise error

    info = ErrorInfo.of(_caught(raise_it))
    assert info.code == ""
    assert ErrorInfo.from_dict(info.as_dict()) == info


def test_error_info_dict_round_trip() -> None:
    info = ErrorInfo.of(_caught(_explode_with_value_error))
    data = info.as_dict()
    assert data == {
        "type": "builtins.ValueError",
        "message": "the flux capacitor is empty",
        "traceback": info.traceback,
        "code": "",
    }
    assert json.loads(dumps(data)) == data  # storable as it is
    assert ErrorInfo.from_dict(data) == info

    ours = ErrorInfo.of(_caught(_raise_duplicate))
    assert ours.as_dict()["code"] == "X_STEP_DUPLICATE"
    assert ErrorInfo.from_dict(ours.as_dict()) == ours


def test_error_info_from_dict_fills_missing_fields() -> None:
    assert ErrorInfo.from_dict({"message": "old row"}) == ErrorInfo(
        type="", message="old row", traceback="", code=""
    )


@pytest.mark.parametrize(
    ("stored", "shown"),
    [
        ("builtins.ValueError", "ValueError"),
        ("__main__.CardDeclined", "CardDeclined"),
        ("shop.errors.CardDeclined", "shop.errors.CardDeclined"),
        ("shop.builtins.Odd", "shop.builtins.Odd"),
        ("", ""),
    ],
)
def test_an_error_type_is_shown_as_pythons_traceback_shows_it(stored: str, shown: str) -> None:
    assert shown_type(stored) == shown


def test_an_error_line_is_the_code_or_the_type_a_colon_and_the_message() -> None:
    assert error_line("builtins.ValueError", "card declined") == "ValueError: card declined"
    assert error_line("shop.errors.CardDeclined", "no") == "shop.errors.CardDeclined: no"
    assert (
        error_line(
            "django_durable_jobs.exceptions.JobTimeoutError", "over 1m", code="X_JOB_TIMEOUT"
        )
        == "X_JOB_TIMEOUT: over 1m"
    )
    assert error_line("", "lost") == "lost"
    assert error_line("builtins.KeyError", "") == "KeyError"


@pytest.mark.parametrize("value", [None, True, False])
def test_the_constants_come_back_as_they_are_and_still_count_towards_a_limit(value: Any) -> None:
    assert roundtrip(value) is value and roundtrip(value, limit=5) is value
    with pytest.raises(NotStorable) as excinfo:
        roundtrip(value, limit=len(dumps(value)) - 1)
    assert excinfo.value.too_large is True


def test_keys_become_strings_and_two_that_become_one_are_refused() -> None:
    """JSON's keys are strings: ``{1: x}`` is stored (and read back) as ``{"1": x}``;
    ``{1: "a", "1": "b"}`` would keep one value without a word."""
    from django_durable_jobs.engine.serialization import NotStorable, roundtrip

    assert roundtrip({1: "a", "b": [{2.5: None, None: 1}]}) == {
        "1": "a",
        "b": [{"2.5": None, "null": 1}],
    }
    for clash, key in (({1: "a", "1": "b"}, "'1'"), ({"x": [{True: 1, "true": 2}]}, "'true'")):
        with pytest.raises(NotStorable, match=f"become the same JSON key {key}"):
            roundtrip(clash)


def test_a_huge_error_is_stored_cut_with_its_end() -> None:
    from django_durable_jobs.engine.serialization import (
        MAX_ERROR_MESSAGE,
        MAX_TRACEBACK,
        ErrorInfo,
    )

    try:
        raise ValueError("start " + "x" * 5_000_000 + " the end")
    except ValueError as exc:
        info = ErrorInfo.of(exc)
    assert len(info.message) < MAX_ERROR_MESSAGE + 100
    assert info.message.startswith("start xxx") and info.message.endswith("x the end")
    assert f"[... {5_000_014 - MAX_ERROR_MESSAGE} characters cut ...]" in info.message
    assert len(info.traceback) < MAX_TRACEBACK + 100
    assert info.traceback.startswith("Traceback (most recent call last):")
    assert info.traceback.endswith(" the end\n")
