"""``encode_arguments``: a call's arguments checked and encoded once, the JSON text
being what the insert sends (``enqueue``, ``enqueue_many``)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from django_durable_jobs.engine.serialization import (
    check_arguments_payload,
    encode_arguments,
    roundtrip,
)
from django_durable_jobs.exceptions import InvalidPayload, PayloadTooLarge

LIMIT = 1_000_000


@pytest.mark.parametrize(
    ("args", "kwargs"),
    [
        ((), {}),
        ((1, "ü ✓", None), {}),
        ((), {"when": [1.5, {"k": (1, 2)}], "n": {1: "one"}}),
        (("é" * 1000,), {"x": True}),
    ],
)
def test_the_texts_store_what_a_round_trip_stores(
    args: tuple[Any, ...], kwargs: dict[Any, Any]
) -> None:
    checked = encode_arguments("job 'x': ", args, kwargs, limit=LIMIT)
    stored = roundtrip([list(args), dict(kwargs)])
    assert [checked.args, checked.kwargs] == stored
    assert [json.loads(checked.args_json), json.loads(checked.kwargs_json)] == stored
    assert "\\u" not in checked.args_json  # UTF-8 as it is, compact
    assert ", " not in checked.args_json and ": " not in checked.kwargs_json


def test_no_arguments_need_no_encoding() -> None:
    checked = encode_arguments("", (), {}, limit=7)
    assert (checked.args_json, checked.kwargs_json) == ("[]", "{}")
    with pytest.raises(PayloadTooLarge, match="7 bytes, over the limit of 6"):
        encode_arguments("", (), {}, limit=6)


@pytest.mark.parametrize(
    "value", [float("inf"), "a\udc00", "\x00", b"bytes", {("a",): 1}, {1: 1, "1": 2}]
)
def test_a_refused_value_is_named_as_before(value: object) -> None:
    with pytest.raises(InvalidPayload) as raised:
        encode_arguments("job 'x': ", (1,), {"v": value}, limit=LIMIT)
    assert "job 'x': argument 'v'" in str(raised.value)
    with pytest.raises(InvalidPayload) as again:
        check_arguments_payload("job 'x': ", (1,), {"v": value}, limit=LIMIT)
    assert str(again.value) == str(raised.value)
