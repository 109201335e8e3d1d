"""Short run ids: any unique prefix of at least six characters works wherever a run id
is asked for (the verbs, ``manage.py jobs``, the admin's search), with a clear message
for one that is too short, ambiguous or not an id at all."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from io import StringIO

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import Client
from django.urls import reverse

from django_durable_jobs.exceptions import RunNotFound
from django_durable_jobs.models import JobRun, RunStatus
from django_durable_jobs.verbs import runs
from tests.factories import JobRunFactory

pytestmark = pytest.mark.django_db

FIRST = uuid.UUID("6e80d980-f0c0-40f2-bf53-354f55735af3")
TWIN = uuid.UUID("6e80d9aa-0000-4000-8000-000000000000")  # shares "6e80d9"
CHANGELIST = "admin:django_durable_jobs_jobrun_changelist"


@pytest.fixture
def pair() -> tuple[JobRun, JobRun]:
    first = JobRunFactory.create(id=FIRST, status=RunStatus.FAILED, error="boom")
    return first, JobRunFactory.create(id=TWIN)


@pytest.mark.parametrize(
    "given", ["6e80d980", "6E80D980", " 6e80d98 ", "6e80d980-f0c0", "6e80d980f0c040", str(FIRST)]
)
def test_a_unique_prefix_of_six_or_more_characters_finds_the_run(pair, given) -> None:
    assert runs.get_run(given).pk == FIRST


@pytest.mark.parametrize(
    ("given", "says"),
    [
        ("6e80d9", "run id prefix '6e80d9' is ambiguous: it matches .*6e80d980-f0c0"),
        ("6e80d", "run id prefix '6e80d' is too short: give at least 6 characters"),
        ("6e80d980-", None),  # a dash alone adds nothing: still unique
        ("ffffff", "no run id starts with 'ffffff'"),
        ("nope", "'nope' is not a run id (a UUID, or its first 6 or more characters)"),
        ("6e80d980f0c040f2bf53354f55735af3ff", "is not a run id"),
    ],
)
def test_a_prefix_that_does_not_name_one_run_says_why(pair, given, says) -> None:
    if says is None:
        assert runs.get_run(given).pk == FIRST
        return
    with pytest.raises(RunNotFound, match=says.replace("(", r"\(").replace(")", r"\)")):
        runs.get_run(given)


def test_the_verbs_take_a_prefix(pair) -> None:
    assert runs.retry("6e80d980").status == RunStatus.QUEUED
    assert runs.cancel("6e80d980").status == RunStatus.CANCELLED
    _, twin = pair  # wake takes a run scheduled for later (a due one is refused)
    twin.wake_at = datetime(2100, 1, 1, tzinfo=UTC)
    twin.save(update_fields=["wake_at"])
    assert runs.wake("6e80d9aa").pk == TWIN


def test_jobs_show_and_retry_take_the_eight_characters_the_admin_shows(pair) -> None:
    out = StringIO()
    call_command("jobs", "show", "6e80d980", stdout=out)
    assert out.getvalue().startswith(f"run {FIRST}")
    out = StringIO()
    call_command("jobs", "retry", "6e80d980", stdout=out)
    assert f"run {FIRST} retried: now queued" in out.getvalue()
    with pytest.raises(CommandError, match="ambiguous: it matches"):
        call_command("jobs", "show", "6e80d9")


def test_admin_search_says_how_many_characters_an_id_needs(admin_client: Client, pair) -> None:
    short = admin_client.get(reverse(CHANGELIST), {"q": "6e80"}, follow=True)
    assert "To find a run by its id, type at least 6 of its first characters." in (
        short.content.decode()
    )
    both = admin_client.get(reverse(CHANGELIST), {"q": "6e80d9"}).content.decode()
    assert "6e80d980" in both and "6e80d9aa" in both and "type at least" not in both
    # A short term that finds runs by job name is not an id search gone wrong.
    JobRunFactory.create(job_name="tests.add")
    named = admin_client.get(reverse(CHANGELIST), {"q": "add"}).content.decode()
    assert "type at least" not in named
