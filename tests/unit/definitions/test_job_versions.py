"""``@job(version=N)``: versions of one job name side by side, looked up by version."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from django_durable_jobs import job
from django_durable_jobs.definitions.registry import (
    all_jobs,
    all_versions,
    attempts_of,
    find_job,
    get_job,
    latest,
    register_job,
    unregister,
)
from django_durable_jobs.exceptions import UnknownJob


@pytest.fixture(autouse=True)
def _restore_registry() -> Iterator[None]:
    """Forget every version a test registered."""
    before = all_versions()
    yield
    for definition in all_versions():
        if definition not in before:
            unregister(definition.name, definition.version)
    for definition in before:
        if find_job(definition.name, definition.version) is not definition:
            register_job(definition)


def _two_versions() -> tuple[Any, Any]:
    @job(name="unit.versioned", retries=1)
    def first(ctx: Any) -> str:
        return "one"

    @job(name="unit.versioned", version=2, retries=5)
    def second(ctx: Any) -> str:
        return "two"

    return first, second


def test_versions_of_one_name_are_registered_side_by_side() -> None:
    first, second = _two_versions()
    assert (first.version, second.version) == (1, 2)
    assert get_job("unit.versioned") is second  # the highest: what enqueue starts
    assert get_job("unit.versioned", 1) is first
    assert get_job("unit.versioned", 2) is second
    assert all_jobs()["unit.versioned"] is second
    assert [d for d in all_versions() if d.name == "unit.versioned"] == [first, second]


def test_the_latest_version_is_the_highest_whatever_the_order_of_registration() -> None:
    @job(name="unit.backwards", version=3)
    def third(ctx: Any) -> None: ...

    @job(name="unit.backwards")
    def first(ctx: Any) -> None: ...

    assert get_job("unit.backwards") is third
    assert latest(first) is third
    assert latest(third) is third


def test_a_missing_version_is_unknown_and_says_which_versions_there_are() -> None:
    _two_versions()
    with pytest.raises(UnknownJob, match=r"'unit\.versioned' has no version 7.*versions: 1, 2"):
        get_job("unit.versioned", 7)
    assert find_job("unit.versioned", 7) is None


def test_attempts_are_the_runs_own_versions() -> None:
    _two_versions()
    assert attempts_of("unit.versioned", 1) == 2
    assert attempts_of("unit.versioned", 2) == 6
    assert attempts_of("unit.versioned", 3) is None


def test_another_function_under_a_taken_name_and_version_fails() -> None:
    first, _ = _two_versions()

    def impostor(ctx: Any) -> str:
        return "?"

    with pytest.raises(ValueError, match=r"'unit\.versioned' version 2 is already used by"):
        job(name="unit.versioned", version=2)(impostor)
    assert get_job("unit.versioned", 1) is first


@pytest.mark.parametrize("version", [0, -1, True, "2", 2.0, 2**31])
def test_a_version_is_a_positive_int(version: Any) -> None:
    with pytest.raises(ValueError, match="@job version must be"):

        @job(name="unit.bad-version", version=version)
        def bad(ctx: Any) -> None: ...

    assert "unit.bad-version" not in all_jobs()


def test_forgetting_one_version_keeps_the_others() -> None:
    first, _ = _two_versions()
    unregister("unit.versioned", 2)
    assert get_job("unit.versioned") is first
    unregister("unit.versioned", 1)
    assert "unit.versioned" not in all_jobs()
