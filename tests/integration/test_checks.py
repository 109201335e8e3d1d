"""The ``check`` command with the app's settings checks: it reads the database's
features (JSONField support), so these run with the database; the rules themselves are
unit tests (tests/unit/test_checks.py). And Django's database-dependent model checks
(``databases=``), which must find nothing to say about this app's models on any database."""

from __future__ import annotations

from typing import Any

import pytest
from django.core.checks import WARNING, CheckMessage, Error, run_checks
from django.core.management import call_command
from django.core.management.base import SystemCheckError
from django.db import models
from django.db.models import Q
from django.test import override_settings

from django_durable_jobs.checks import check_settings
from django_durable_jobs.models import JobRun

APP = "django_durable_jobs"


# Django >= 6.0 runs the database-aware model checks in ``check`` too.
@pytest.mark.django_db(databases=["default", "other", "jobs"])  # JSONField checks ask each
def test_check_command_fails_on_a_bad_setting() -> None:
    with (
        override_settings(DURABLE_JOBS={"RETRIES": -1}),
        pytest.raises(SystemCheckError, match=r"django_durable_jobs\.E003"),
    ):
        call_command("check")


@pytest.mark.django_db(databases=["default", "other", "jobs"])  # JSONField checks ask each
def test_check_command_passes_with_defaults(capsys: pytest.CaptureFixture[str]) -> None:
    with override_settings(DURABLE_JOBS={}):
        call_command("check")
    assert "no issues" in capsys.readouterr().out


# The check command asks the database's features (JSONField support on SQLite): like the
# other call_command("check") tests it needs the database, whichever test ran first.
@pytest.mark.django_db(databases=["default", "other", "jobs"])  # JSONField checks ask each
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


def _app_messages(messages: list[CheckMessage]) -> list[CheckMessage]:
    """The warnings and errors about this app: its own ids, or its models and their parts."""
    found = []
    for message in messages:
        owner = getattr(message.obj, "model", message.obj)  # a field or index: its model
        meta = getattr(owner, "_meta", None)
        ours = message.id is not None and message.id.startswith(f"{APP}.")
        if message.level >= WARNING and (ours or getattr(meta, "app_label", "") == APP):
            found.append(message)
    return found


def _database_checks() -> list[CheckMessage]:
    """Django's checks with the database, as ``manage.py check --database default`` runs them.

    The model checks that ask the backend (models.W037: partial indexes; W036, W040...)
    see a database only when ``databases`` names it: on Django 5.2 a bare
    ``call_command("check")`` runs none of them (6.0 passes every alias), and the
    database-tagged ones (W030, unapplied migrations) run only when asked on any version."""
    return _app_messages(run_checks(databases=["default"], include_deployment_checks=False))


# On every database of the integration tier: MariaDB (no partial indexes) is the one that
# used to warn five times, but a model change can make any backend warn.
@pytest.mark.django_db(databases=["default", "other", "jobs"])  # JSONField checks ask each
def test_no_database_check_warns_about_this_app() -> None:
    assert _database_checks() == []
    call_command("check", databases=["default"], fail_level="WARNING")


@pytest.mark.mariadb(reason="only MariaDB/MySQL lack partial indexes (models.W037)")
@pytest.mark.django_db(databases=["default", "other", "jobs"])  # JSONField checks ask each
def test_the_guard_sees_a_partial_index_declared_the_plain_django_way(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The test above would fail if a partial index were a plain ``models.Index(condition=)``
    instead of ``schema.PartialIndex``: Django then warns that MariaDB ignores the condition."""
    plain = models.Index(fields=["wake_at"], condition=Q(status="queued"), name="durable_plain")
    monkeypatch.setattr(JobRun._meta, "indexes", [*JobRun._meta.indexes, plain])
    assert [message.id for message in _database_checks()] == ["models.W037"]
    with pytest.raises(SystemCheckError, match=r"models\.W037"):
        call_command("check", databases=["default"], fail_level="WARNING")
