"""Edge inputs refused or accepted before anything is written: run_after values,
unstorable strings, nesting depth, ``using`` options."""

from __future__ import annotations

from datetime import date
from typing import Any

import pytest

from django_durable_jobs.declare import job
from django_durable_jobs.engine.serialization import MAX_DEPTH, NotStorable, dumps
from django_durable_jobs.exceptions import InvalidDuration
from tests.testapp import input_jobs, jobs


@pytest.mark.parametrize("given", ["soon", -5, date(2030, 1, 1), float("nan")])
def test_run_after_that_is_neither_a_duration_nor_a_datetime_is_duration_invalid(
    given: Any,
) -> None:
    with pytest.raises(InvalidDuration, match="run_after"):
        jobs.noop.using(run_after=given)


@pytest.mark.parametrize(
    "value",
    ["\ud800", ["ok", "x\udfffy"], {"\ud800": 1}, {"a": {"b": ["\udc00"]}}],
    ids=["str", "in-list", "dict-key", "nested"],
)
def test_lone_surrogates_are_not_storable(value: Any) -> None:
    with pytest.raises(NotStorable, match="surrogate"):
        dumps(value)


def test_nesting_deeper_than_the_interpreter_allows_is_not_storable() -> None:
    with pytest.raises(NotStorable, match=f"more than {MAX_DEPTH} levels"):
        dumps(input_jobs.nested(100_000))
    with pytest.raises(NotStorable, match=f"more than {MAX_DEPTH} levels"):
        dumps({"a": input_jobs.nested(MAX_DEPTH)})


def test_nesting_up_to_the_limit_is_storable() -> None:
    assert dumps(input_jobs.nested(MAX_DEPTH)).count("[") == MAX_DEPTH
    # Many brackets side by side are not depth.
    assert dumps([[1]] * 1000)


@pytest.mark.parametrize(
    "options",
    [
        {"priority": 2**40},
        {"priority": -(2**40)},
        {"priority": 1.5},
        {"priority": True},
        {"queue": "x" * 500},
        {"queue": ""},
        {"queue": 7},
        {"queue": "mail\x00"},
    ],
)
def test_using_validates_options_like_job_does(options: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match=r"using\(\) (priority|queue)"):
        jobs.noop.using(**options)
    with pytest.raises(ValueError, match=r"@job (priority|queue)"):
        job(name="tests.inputs.never", **options)(lambda ctx: None)
    with pytest.raises(ValueError, match=r"using\(\) (priority|queue)"):
        jobs.noop.using(queue="mail").using(**options)
