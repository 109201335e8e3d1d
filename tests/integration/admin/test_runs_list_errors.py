"""The runs list shows each run's error as ``jobs list`` does, under its status, cut
short with the whole of it on hover, and its search finds runs by their error."""

from __future__ import annotations

import re

import pytest
from django.test import Client
from django.urls import reverse

from django_durable_jobs.models import JobRun, RunStatus
from tests.factories import JobRunFactory

pytestmark = pytest.mark.django_db

CHANGELIST = reverse("admin:django_durable_jobs_jobrun_changelist")


def runs() -> dict[str, JobRun]:
    return {
        "declined": JobRunFactory.create(
            status=RunStatus.FAILED,
            error_type="builtins.ValueError",
            error="Card declined by the bank <b>" + " and a long explanation" * 60,
        ),
        "timeout": JobRunFactory.create(
            status=RunStatus.FAILED,
            error_code="X_JOB_TIMEOUT",
            error_type="django_durable_jobs.exceptions.JobTimeout",
            error="run took over 1m",
        ),
        "fine": JobRunFactory.create(status=RunStatus.SUCCEEDED, job_name="tests.ops.napper"),
    }


def found(admin_client: Client, term: str, made: dict[str, JobRun]) -> set[str]:
    page = admin_client.get(CHANGELIST, {"q": term}).content.decode()
    return {name for name, run in made.items() if str(run.pk)[:8] in page}


def test_the_list_shows_the_error_short_with_the_whole_on_hover(admin_client: Client) -> None:
    made = runs()
    page = admin_client.get(CHANGELIST).content.decode()
    cells = re.findall(r'<span class="djdj-error" title="([^"]*)">(.*?)</span>', page)
    shown = {short.replace("<wbr>", ""): title for title, short in cells}
    assert set(shown) == {"ValueError: Card declined by th…", "X_JOB_TIMEOUT: run took over 1m"}
    assert "X_<wbr>JOB_<wbr>TIMEOUT" in page  # breaks after "_", not mid-word
    whole = shown["ValueError: Card declined by th…"]  # 32 characters, the whole on hover
    assert whole.startswith("ValueError: Card declined by the bank &lt;b&gt; and a long")
    assert len(whole) > 900
    row = next(r for r in page.split("<tr") if str(made["fine"].pk)[:8] in r)
    assert "djdj-error" not in row  # under the status badge, for a run with an error only
    assert row.count('class="field-status_cell"') == 1


@pytest.mark.parametrize(
    ("term", "wanted"),
    [
        ("card", {"declined"}),  # words of the message, whatever the case
        ("DECLINED BY", {"declined"}),
        ("valueerror", {"declined"}),  # the exception type
        ("x_job_timeout", {"timeout"}),  # the error code
        ("JobTimeout", {"timeout"}),
        ("ops.napper", {"fine"}),  # job names still
    ],
)
def test_search_finds_runs_by_their_error(
    admin_client: Client, term: str, wanted: set[str]
) -> None:
    assert found(admin_client, term, runs()) == wanted
