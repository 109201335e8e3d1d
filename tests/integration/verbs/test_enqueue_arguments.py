"""Wrong arguments are refused at enqueue, naming the job, the parameter, the signature
and, for a value that is not JSON, the path inside it; ``InvalidPayload`` is a TypeError."""

from __future__ import annotations

import pytest

from django_durable_jobs import InvalidPayload, PayloadTooLarge, enqueue
from django_durable_jobs.models import JobRun
from tests.testapp.jobs import add, onboarding


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("call", "says"),
    [
        (lambda: onboarding.enqueue(customer_id=1), "unexpected keyword argument 'customer_id'"),
        (lambda: onboarding.enqueue(), "missing a required argument: 'user_id'"),
        (lambda: onboarding.enqueue(1, 2), "too many positional arguments"),
        (lambda: add.enqueue(1, a=2), "multiple values for argument 'a'"),
        (lambda: enqueue("tests.add", 1), "missing a required argument: 'b'"),
        (lambda: add.using(queue="q").enqueue(c=1, a=1, b=2), "unexpected keyword argument 'c'"),
    ],
)
def test_arguments_that_do_not_fit_the_signature_are_refused_at_enqueue(call, says) -> None:
    with pytest.raises(InvalidPayload) as info:
        call()
    message = str(info.value)
    assert info.value.code == "X_PAYLOAD_INVALID"
    assert says in message
    assert "the job is onboarding(ctx, user_id)" in message or "add(ctx, a, b)" in message
    assert not JobRun.objects.exists()


@pytest.mark.django_db
def test_enqueue_many_names_the_call_whose_arguments_do_not_fit() -> None:
    with pytest.raises(InvalidPayload, match=r"call 1: missing a required argument: 'b'"):
        add.enqueue_many([(1, 2), (3,)])
    assert not JobRun.objects.exists()


@pytest.mark.django_db
def test_arguments_that_fit_are_accepted_positionally_or_by_name() -> None:
    assert add.enqueue(1, 2).args == [1, 2]
    assert add.enqueue(1, b=2).kwargs == {"b": 2}
    assert onboarding.enqueue(user_id=3).kwargs == {"user_id": 3}


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("value", "path"),
    [
        ({"items": [1, 2, {3}]}, "argument 'b'['items'][2]"),
        ([{"ok": 1}, {"price": float("nan")}], "argument 'b'[1]['price']"),
        ({"note": ["fine", "nul\x00"]}, "argument 'b'['note'][1]"),
        ({"ünï": {"when": object()}}, "argument 'b'['ünï']['when']"),
        ({(1, 2): "tuple key"}, "argument 'b'[(1, 2)]"),
    ],
)
def test_invalid_payload_names_the_path_inside_a_nested_value(value, path) -> None:
    with pytest.raises(InvalidPayload) as info:
        add.enqueue(1, b=value)
    assert f"job 'tests.add': {path} cannot be stored as JSON" in str(info.value)


@pytest.mark.django_db
def test_a_circular_value_is_named_where_it_loops() -> None:
    loop: list[object] = [1]
    loop.append({"again": loop})
    with pytest.raises(InvalidPayload, match=r"argument 0\[1\]\['again'\] cannot be stored"):
        add.enqueue(loop, 2)


@pytest.mark.django_db
def test_invalid_payload_is_a_type_error_as_django_tasks_documents() -> None:
    with pytest.raises(TypeError):  # code written for django.tasks catches it
        add.enqueue({1, 2}, 3)
    assert issubclass(PayloadTooLarge, InvalidPayload)


@pytest.mark.django_db
def test_two_keys_that_json_makes_one_are_refused_at_enqueue() -> None:
    """``{1: "a", "1": "b"}`` was stored as ``{"1": "b"}``: a value lost without a word."""
    with pytest.raises(
        InvalidPayload,
        match=r"argument 'b' cannot be stored as JSON: two of a dict's keys become the same "
        r"JSON key '1'",
    ):
        add.enqueue(1, b={1: "a", "1": "b"})
    assert not JobRun.objects.exists()
    assert add.enqueue(1, {1: "a"}).args == [1, {"1": "a"}]  # JSON's keys are strings
