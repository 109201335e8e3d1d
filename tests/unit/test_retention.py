"""The RETENTION setting's system check and its default (off)."""

from __future__ import annotations

from typing import Any

import pytest

from django_durable_jobs.checks import check_settings
from django_durable_jobs.definitions.registry import all_jobs
from django_durable_jobs.models.rules import FINISHED
from django_durable_jobs.verbs import retention


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("7d", "expected a dict of status -> age"),
        ({}, "expected a dict of status -> age"),
        ({"succeded": "7d"}, "unknown status 'succeded'"),
        ({"queued": "7d"}, "unknown status 'queued'"),
        ({"failed": "30 days"}, "failed: "),
        ({"failed": 0}, "failed: it must be longer than zero"),
    ],
)
def test_a_bad_retention_is_a_system_check_error(settings: Any, value: Any, message: str) -> None:
    settings.DURABLE_JOBS = {"RETENTION": value}
    (error,) = check_settings()
    assert error.id == "django_durable_jobs.E030"
    assert message in error.msg and "RETENTION" in error.msg


def test_retention_is_off_by_default(settings: Any) -> None:
    settings.DURABLE_JOBS = {}
    assert check_settings() == []
    assert retention.JOB_NAME not in all_jobs()


def test_retention_takes_every_finished_status_as_jobs_purge_does(settings: Any) -> None:
    settings.DURABLE_JOBS = {"RETENTION": dict.fromkeys(FINISHED, "7d")}
    assert check_settings() == []
