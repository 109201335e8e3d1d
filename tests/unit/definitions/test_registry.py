"""``@job``: names, options validated at decoration time, lookup and autodiscovery."""

from __future__ import annotations

import importlib
import sys
import textwrap
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from django_durable_jobs import job
from django_durable_jobs.definitions.discovery import autodiscover
from django_durable_jobs.definitions.registry import (
    JobDefinition,
    all_jobs,
    get_job,
    register_job,
    unregister,
)
from django_durable_jobs.engine.durations import parse_duration
from django_durable_jobs.engine.limits import Limit
from django_durable_jobs.exceptions import InvalidDuration, UnknownJob


@pytest.fixture(autouse=True)
def _restore_registry() -> Iterator[None]:
    """Forget every job a test registered; put back any it replaced."""
    before = all_jobs()
    yield
    for name in set(all_jobs()) - set(before):
        unregister(name)
    for name, definition in before.items():
        if all_jobs().get(name) is not definition:
            unregister(name)
            register_job(definition)


# -- names ---------------------------------------------------------------------------


def test_bare_job_is_named_module_and_qualname() -> None:
    @job
    def bare(ctx: Any) -> str:
        return "bare"

    expected = f"{__name__}.test_bare_job_is_named_module_and_qualname.<locals>.bare"
    assert (
        expected == "tests.unit.definitions.test_registry."
        "test_bare_job_is_named_module_and_qualname.<locals>.bare"
    )
    assert isinstance(bare, JobDefinition)
    assert bare.name == expected
    assert get_job(expected) is bare
    assert bare.fn.__name__ == "bare"


def test_bare_job_has_the_defaults() -> None:
    @job
    def defaults(ctx: Any) -> None:
        return None

    assert defaults.queue == "default"
    assert defaults.priority == 0
    assert defaults.retries is None  # "from settings" at execution time
    assert defaults.backoff is None
    assert defaults.timeout is None
    assert defaults.step_timeout is None
    assert defaults.on_event is None
    assert defaults.concurrency is None


def test_options_are_stored_parsed() -> None:
    @job(
        name="unit.options",
        queue="mail",
        priority=5,
        retries=4,
        backoff="5s",
        timeout="1h",
        step_timeout="5m",
        on_event="user.signed_up",
        concurrency=2,
    )
    def with_options(ctx: Any, payload: dict[str, Any]) -> None:
        return None

    definition = get_job("unit.options")
    assert definition is with_options
    assert definition.name == "unit.options"
    assert definition.queue == "mail"
    assert definition.priority == 5
    assert definition.retries == 4
    assert definition.backoff is not None
    assert not callable(definition.backoff)
    assert parse_duration(definition.backoff) == timedelta(seconds=5)
    assert definition.timeout == timedelta(hours=1)
    assert definition.step_timeout == timedelta(minutes=5)
    assert definition.on_event == "user.signed_up"
    assert definition.concurrency == Limit("concurrency", 2, None)


def test_timeouts_accept_every_duration_form() -> None:
    @job(name="unit.durations", timeout=timedelta(minutes=2), step_timeout=90)
    def durations(ctx: Any) -> None:
        return None

    assert durations.timeout == timedelta(minutes=2)
    assert durations.step_timeout == timedelta(seconds=90)


def test_backoff_zero_and_callable_are_accepted() -> None:
    def schedule(attempt: int) -> str:
        return f"{attempt}s"

    @job(name="unit.backoff-zero", backoff=0, retries=0)
    def at_once(ctx: Any) -> None:
        return None

    @job(name="unit.backoff-callable", backoff=schedule)
    def scheduled(ctx: Any) -> None:
        return None

    assert at_once.backoff == 0
    assert at_once.retries == 0
    assert scheduled.backoff is schedule


def test_decorated_job_is_still_callable() -> None:
    seen = []

    @job(name="unit.callable")
    def callable_job(ctx: Any, a: int, *, b: int) -> int:
        seen.append((ctx, a, b))
        return a + b

    assert callable_job("ctx", 2, b=3) == 5
    assert seen == [("ctx", 2, 3)]


# -- invalid options fail at decoration time -----------------------------------------


def _fn(ctx: Any) -> None:
    return None


INVALID_OPTIONS: list[tuple[dict[str, Any], type[Exception], list[str]]] = [
    ({"retries": -1}, ValueError, ["retries", "-1"]),
    ({"retries": "3"}, ValueError, ["retries", "'3'"]),
    ({"retries": True}, ValueError, ["retries", "True"]),
    ({"priority": "high"}, ValueError, ["priority", "'high'"]),
    ({"priority": 1.5}, ValueError, ["priority", "1.5"]),
    ({"timeout": "soon"}, InvalidDuration, ["timeout", "'soon'"]),
    ({"timeout": 0}, ValueError, ["timeout", "0"]),
    ({"timeout": "0s"}, ValueError, ["timeout", "'0s'"]),
    ({"timeout": -5}, InvalidDuration, ["timeout", "-5"]),
    ({"step_timeout": "5 mins"}, InvalidDuration, ["step_timeout", "'5 mins'"]),
    ({"step_timeout": timedelta(0)}, ValueError, ["step_timeout"]),
    ({"queue": ""}, ValueError, ["queue", "''"]),
    ({"queue": None}, ValueError, ["queue", "None"]),
    ({"queue": "q" * 101}, ValueError, ["queue"]),
    ({"backoff": "5 mins"}, InvalidDuration, ["backoff", "'5 mins'"]),
    ({"backoff": -1}, InvalidDuration, ["backoff", "-1"]),
    ({"on_event": ""}, ValueError, ["on_event", "''"]),
    ({"concurrency": 0}, ValueError, ["concurrency", "0"]),
    ({"name": ""}, ValueError, ["name", "''"]),
    ({"name": 42}, ValueError, ["name", "42"]),
    ({"name": "n" * 201}, ValueError, ["name"]),
]


@pytest.mark.parametrize(
    ("options", "error", "words"),
    [
        pytest.param(*case, id=",".join(f"{k}={v!r}"[:30] for k, v in case[0].items()))
        for case in INVALID_OPTIONS
    ],
)
def test_invalid_option_raises_at_decoration_time(
    options: dict[str, Any], error: type[Exception], words: list[str]
) -> None:
    before = all_jobs()
    decorate = job(**options)
    with pytest.raises(error) as excinfo:
        decorate(_fn)
    message = str(excinfo.value)
    for word in words:
        assert word in message, f"{word!r} not in {message!r}"
    assert all_jobs() == before  # nothing registered


def test_invalid_duration_option_keeps_its_code() -> None:
    with pytest.raises(InvalidDuration) as excinfo:
        job(name="unit.bad-timeout", timeout="soon")(_fn)
    assert excinfo.value.code == "X_DURATION_INVALID"


# -- one function per name -----------------------------------------------------------


def test_a_different_function_under_a_taken_name_fails() -> None:
    @job(name="unit.clash")
    def first(ctx: Any) -> str:
        return "first"

    def second(ctx: Any) -> str:
        return "second"

    with pytest.raises(ValueError, match=r"unit\.clash") as excinfo:
        job(name="unit.clash")(second)
    message = str(excinfo.value)
    assert "test_a_different_function_under_a_taken_name_fails.<locals>.first" in message
    assert "test_a_different_function_under_a_taken_name_fails.<locals>.second" in message
    assert get_job("unit.clash") is first  # the first one stays


def test_registering_the_same_function_again_is_fine() -> None:
    @job(name="unit.twice")
    def twice(ctx: Any) -> str:
        return "twice"

    again = job(name="unit.twice", priority=3)(twice.fn)
    assert get_job("unit.twice") is again
    assert again.priority == 3


def test_module_reload_re_registers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    module_name = "unit_reloaded_jobs"
    source = textwrap.dedent(
        """
        from django_durable_jobs import job

        @job(name="unit.reloaded", priority={priority})
        def reloaded(ctx):
            return {priority}
        """
    )
    path = tmp_path / f"{module_name}.py"
    path.write_text(source.format(priority=1))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, module_name, raising=False)
    # The source is rewritten within the same second at the same size: a .pyc written
    # by the first import would look current and be loaded again.
    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    try:
        module = importlib.import_module(module_name)
        old_fn = get_job("unit.reloaded").fn
        path.write_text(source.format(priority=2))
        importlib.invalidate_caches()
        module = importlib.reload(module)  # a new function object, same module and qualname
        definition = get_job("unit.reloaded")
        assert definition.fn is not old_fn
        assert definition is module.reloaded
        assert definition.priority == 2
        assert definition(None) == 2
    finally:
        sys.modules.pop(module_name, None)


# -- lookup --------------------------------------------------------------------------


def test_unknown_job_suggests_close_matches() -> None:
    with pytest.raises(UnknownJob) as excinfo:
        get_job("tests.onboardin")
    error = excinfo.value
    assert error.code == "X_JOB_UNKNOWN"
    assert "'tests.onboardin' (did you mean 'tests.onboarding' or " in str(error)
    assert "?); jobs are imported from" in str(error)
    assert "?;" not in str(error)


def test_unknown_job_without_close_matches() -> None:
    with pytest.raises(UnknownJob) as excinfo:
        get_job("zzzz-nothing-like-it")
    assert "'zzzz-nothing-like-it'" in str(excinfo.value)
    assert "did you mean" not in str(excinfo.value)


def test_unregister_forgets_a_job() -> None:
    job(name="unit.forget")(_fn)
    assert "unit.forget" in all_jobs()
    unregister("unit.forget")
    assert "unit.forget" not in all_jobs()
    with pytest.raises(UnknownJob):
        get_job("unit.forget")
    unregister("unit.forget")  # forgetting twice is fine


def test_all_jobs_is_a_copy() -> None:
    jobs = all_jobs()
    jobs["unit.not-registered"] = jobs["tests.noop"]
    assert "unit.not-registered" not in all_jobs()


# -- autodiscovery -------------------------------------------------------------------


def test_installed_apps_jobs_modules_are_autodiscovered() -> None:
    # django.setup() ran AppConfig.ready(), which imported tests/testapp/jobs.py.
    assert "tests.testapp.jobs" in sys.modules
    jobs = all_jobs()
    for name in ("tests.onboarding", "tests.noop", "tests.three_steps"):
        assert name in jobs
    onboarding = jobs["tests.onboarding"]
    assert onboarding.fn.__module__ == "tests.testapp.jobs"
    assert onboarding.retries == 1


def test_autodiscover_again_is_harmless() -> None:
    before = all_jobs()
    autodiscover()
    assert all_jobs() == before


def test_a_signature_is_read_once_per_function_and_builtins_still_work() -> None:
    from django_durable_jobs.engine.signatures import signature_of

    def fn(ctx: object, user_id: int) -> None: ...

    assert signature_of(fn) is signature_of(fn)
    assert list(signature_of(fn).parameters) == ["ctx", "user_id"]
    assert list(signature_of(divmod).parameters) == ["x", "y"]  # not weakly referable
    with pytest.raises(ValueError, match="signature"):
        signature_of(vars)  # a builtin without a readable signature


def test_whether_a_job_is_async_is_read_from_its_function_once() -> None:
    async def later(ctx: Any) -> None:
        return None

    def now(ctx: Any) -> None:
        return None

    sync_job = JobDefinition(name="tests.is_async_sync", fn=now)
    async_job = JobDefinition(name="tests.is_async_async", fn=later)
    assert sync_job.is_async is False and async_job.is_async is True
    assert "is_async" in vars(async_job)  # kept on the (frozen) definition
    assert async_job == JobDefinition(name="tests.is_async_async", fn=later)  # not a field
