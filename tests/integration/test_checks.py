"""The ``check`` command with the app's settings checks: it reads the database's
features (JSONField support), so these run with the database; the rules themselves are
unit tests (tests/unit/test_checks.py)."""

from __future__ import annotations

from typing import Any

import pytest
from django.core.checks import Error
from django.core.management import call_command
from django.core.management.base import SystemCheckError
from django.test import override_settings

from django_durable_jobs.checks import check_settings


# Django >= 6.0 runs the database-aware model checks in ``check`` too.
@pytest.mark.django_db
def test_check_command_fails_on_a_bad_setting() -> None:
    with (
        override_settings(DURABLE_JOBS={"RETRIES": -1}),
        pytest.raises(SystemCheckError, match=r"django_durable_jobs\.E003"),
    ):
        call_command("check")


@pytest.mark.django_db
def test_check_command_passes_with_defaults(capsys: pytest.CaptureFixture[str]) -> None:
    with override_settings(DURABLE_JOBS={}):
        call_command("check")
    assert "no issues" in capsys.readouterr().out


# The check command asks the database's features (JSONField support on SQLite): like the
# other call_command("check") tests it needs the database, whichever test ran first.
@pytest.mark.django_db
@pytest.mark.parametrize(
    ("lease", "heartbeat"), [("10s", "10s"), ("10s", "30s"), ("1s", 1), ("60s", "1m")]
)
def test_a_heartbeat_not_shorter_than_the_lease_is_e018(lease: str, heartbeat: Any) -> None:
    with override_settings(DURABLE_JOBS={"LEASE": lease, "HEARTBEAT": heartbeat}):
        (message,) = check_settings()
    assert isinstance(message, Error) and message.id == "django_durable_jobs.E018"
    assert repr(lease) in message.msg and repr(heartbeat) in message.msg
    with (
        override_settings(DURABLE_JOBS={"LEASE": lease, "HEARTBEAT": heartbeat}),
        pytest.raises(SystemCheckError, match="E018"),
    ):
        call_command("check")
