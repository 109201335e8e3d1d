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
