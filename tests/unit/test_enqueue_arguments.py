"""An ``on_event`` job whose signature cannot take the event's payload fails when its
module is imported, not when the first event arrives."""

from __future__ import annotations

import pytest


def test_an_on_event_job_that_cannot_take_the_payload_fails_at_import() -> None:
    from django_durable_jobs import job

    with pytest.raises(TypeError, match=r"called as fn\(ctx, payload\).*the job is welcome\(ctx\)"):

        @job(name="tests.bad_on_event", on_event="user.signed_up")
        def welcome(ctx):
            return None


@pytest.mark.parametrize(
    ("define", "says"),
    [
        (lambda: lambda: None, r"def <lambda>\(ctx\)"),
        (lambda: _keyword_only, r"def _keyword_only\(ctx, \*, user_id\)"),
    ],
    ids=["no-parameter", "keyword-only"],
)
def test_a_job_function_that_cannot_take_ctx_fails_at_import(define, says) -> None:
    """Called as ``fn(ctx, ...)``: one that takes no positional parameter failed in the
    worker, on every attempt, with "takes 0 positional arguments but 1 was given"."""
    from django_durable_jobs import job
    from django_durable_jobs.definitions.registry import all_jobs

    before = all_jobs()
    with pytest.raises(TypeError, match=r"takes the run's context first, ctx, .*" + says):
        job(name="tests.no_ctx")(define())
    assert all_jobs() == before


def _keyword_only(*, user_id: int) -> None:
    return None


def test_a_job_whose_first_parameter_is_not_ctx_is_told_so_at_enqueue() -> None:
    from django_durable_jobs import InvalidPayload, job
    from django_durable_jobs.definitions.registry import unregister

    @job(name="tests.needs_user")
    def needs_user(user_id: int) -> None:
        return None

    try:
        with pytest.raises(InvalidPayload) as info:
            needs_user.enqueue(1)
    finally:
        unregister("tests.needs_user")
    assert str(info.value).endswith(
        "too many positional arguments; the job is needs_user(user_id) (its first parameter, "
        "'user_id', receives the run's context: did you mean def needs_user(ctx, user_id)?)"
    )
