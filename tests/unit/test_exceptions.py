"""The error contract: stable codes, one class each, a common base."""

from __future__ import annotations

import inspect

import pytest

import django_durable_jobs
from django_durable_jobs import exceptions
from django_durable_jobs.engine.vocabulary import StepKind
from django_durable_jobs.exceptions import DurableJobsError, Suspension

PUBLIC_CODES = [
    "X_STEP_DUPLICATE",
    "X_JOB_TIMEOUT",
    "X_JOB_UNKNOWN",
    "X_PAYLOAD_INVALID",
    "X_PAYLOAD_TOO_LARGE",
    "X_STEP_OUTPUT_INVALID",
    "X_DURATION_INVALID",
    "X_RUN_CANCELLED",
    "X_NON_RETRIABLE",
]


def _classes_in_exceptions_module() -> list[type[BaseException]]:
    return [
        cls
        for _, cls in inspect.getmembers(exceptions, inspect.isclass)
        if cls.__module__ == exceptions.__name__ and issubclass(cls, BaseException)
    ]


def _error_classes() -> list[type[DurableJobsError]]:
    return [
        cls
        for cls in _classes_in_exceptions_module()
        if issubclass(cls, DurableJobsError) and cls is not DurableJobsError
    ]


@pytest.mark.parametrize("code", PUBLIC_CODES)
def test_each_spec_code_is_on_exactly_one_class(code: str) -> None:
    owners = [cls for cls in _error_classes() if cls.code == code]
    assert len(owners) == 1, f"{code} is carried by {owners}"
    (cls,) = owners
    assert issubclass(cls, DurableJobsError)
    # importable from both places, as the very same class
    assert getattr(exceptions, cls.__name__) is cls
    assert getattr(django_durable_jobs, cls.__name__) is cls
    assert cls.__name__ in django_durable_jobs.__all__


def test_every_error_class_declares_its_own_code() -> None:
    # A subclass that forgot ``code`` would silently share its parent's.
    for cls in _error_classes():
        assert "code" in vars(cls), f"{cls.__name__} inherits its code"
    codes = [cls.code for cls in _error_classes()]
    assert len(codes) == len(set(codes))


def test_error_instances_carry_the_code_and_message() -> None:
    for cls in _error_classes():
        if cls is exceptions.RetryAfter:  # its first argument is the delay, tested below
            continue
        error = cls("job 'onboarding' run 42: something happened")
        assert isinstance(error, DurableJobsError)
        assert isinstance(error, Exception)
        assert error.code == cls.code
        assert str(error) == "job 'onboarding' run 42: something happened"


def test_retry_after_carries_its_delay_and_stays_retryable() -> None:
    error = exceptions.RetryAfter("1m30s", "the API said 429")
    assert error.delay.total_seconds() == 90 and str(error) == "the API said 429"
    assert exceptions.RetryAfter(5).delay.total_seconds() == 5
    assert error.retryable and error.code == "X_RETRY_AFTER"


def test_base_class_is_exported_from_both_modules() -> None:
    assert django_durable_jobs.DurableJobsError is exceptions.DurableJobsError
    assert issubclass(DurableJobsError, Exception)


def test_payload_too_large_is_an_invalid_payload() -> None:
    assert issubclass(exceptions.PayloadTooLarge, exceptions.InvalidPayload)
    assert exceptions.PayloadTooLarge.code != exceptions.InvalidPayload.code


@pytest.mark.parametrize(
    "cls",
    [
        exceptions.StepDuplicateError,
        exceptions.JobTimeoutError,
        exceptions.UnknownJob,
        exceptions.InvalidPayload,
        exceptions.PayloadTooLarge,
        exceptions.StepOutputInvalid,
        exceptions.InvalidDuration,
        exceptions.RunCancelled,
        exceptions.NonRetriable,
    ],
)
def test_errors_retrying_cannot_fix_are_not_retryable(cls: type[DurableJobsError]) -> None:
    assert cls.retryable is False


def test_suspension_is_a_base_exception_not_an_exception() -> None:
    assert issubclass(Suspension, BaseException)
    assert not issubclass(Suspension, Exception)
    assert not issubclass(Suspension, DurableJobsError)
    assert django_durable_jobs.Suspension is Suspension


def test_except_exception_cannot_swallow_a_suspension() -> None:
    swallowed = []

    def user_code() -> None:
        try:
            raise Suspension("sleep:3d", None, StepKind.SLEEP)
        except Exception:  # what a job might write around its steps
            swallowed.append(True)

    with pytest.raises(Suspension) as excinfo:
        user_code()
    assert swallowed == []
    assert excinfo.value.step == "sleep:3d"
    assert excinfo.value.wake_at is None
    assert excinfo.value.kind is StepKind.SLEEP


def test_every_exception_class_has_a_docstring() -> None:
    classes = _classes_in_exceptions_module()
    assert DurableJobsError in classes
    assert Suspension in classes
    for cls in classes:
        doc = vars(cls).get("__doc__")
        assert doc and doc.strip(), f"{cls.__name__} has no docstring"
