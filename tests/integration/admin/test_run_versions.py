"""The admin and code changes in flight: the run page shows the run's version and the
steps its finishing code never reached; the runs list filters by version."""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse

from django_durable_jobs.models import RunStatus
from tests.factories import T0, JobRunFactory, StepRecordFactory

pytestmark = pytest.mark.django_db


def test_the_run_page_shows_the_version_and_the_steps_not_reached(admin_client: Client) -> None:
    run = JobRunFactory.create(
        job_name="tests.rolling",
        job_version=2,
        status=RunStatus.SUCCEEDED,
        started_at=T0,
        finished_at=T0,
        unreached_steps=["two", "<b>old</b>"],
    )
    for name in ("one", "two", "<b>old</b>"):
        StepRecordFactory.create(run=run, name=name)
    StepRecordFactory.create(run=run, name="patch:sms", kind="patch", output=True)
    url = reverse("admin:django_durable_jobs_jobrun_change", args=[run.pk])
    html = admin_client.get(url).content.decode()
    assert "<dt>job version</dt><dd>2</dd>" in html
    assert (
        "<strong>Steps not reached by the code that finished this run:</strong> "
        "<code>two</code>, <code>&lt;b&gt;old&lt;/b&gt;</code>."
    ) in html
    assert html.count('class="djdj-not-reached"') == 2  # on their rows, and only theirs
    assert html.count('class="djdj-patch"') == 1


def test_a_run_that_reached_every_step_has_no_such_note(admin_client: Client) -> None:
    run = JobRunFactory.create(status=RunStatus.SUCCEEDED, finished_at=T0)
    StepRecordFactory.create(run=run, name="one")
    html = admin_client.get(
        reverse("admin:django_durable_jobs_jobrun_change", args=[run.pk])
    ).content.decode()
    assert "Steps not reached" not in html and "djdj-not-reached" not in html


def test_the_runs_list_filters_by_version(admin_client: Client) -> None:
    old = JobRunFactory.create(job_name="tests.rolling", job_version=1)
    new = JobRunFactory.create(job_name="tests.rolling", job_version=2)
    changelist = reverse("admin:django_durable_jobs_jobrun_changelist")
    html = admin_client.get(changelist).content.decode()
    assert "By job version" in html and "?job_version=2" in html
    listed = admin_client.get(changelist, {"job_version": 2}).content.decode()
    assert str(new.pk)[:8] in listed and str(old.pk)[:8] not in listed
