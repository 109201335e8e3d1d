"""The runs list's actions with "select all": every run of the current filter, not
only the page, after a confirmation page that says how many runs it touches."""

from __future__ import annotations

import re

import pytest
from django.contrib import admin
from django.contrib.admin.models import LogEntry
from django.contrib.auth.models import Permission, User
from django.test import Client
from django.urls import reverse

from django_durable_jobs.models import JobRun, RunStatus
from tests.factories import FIRST, LAST, JobRunFactory

pytestmark = pytest.mark.django_db

CHANGELIST = reverse("admin:django_durable_jobs_jobrun_changelist")


def hidden_fields(html: str) -> dict[str, list[str]]:
    fields: dict[str, list[str]] = {}
    for name, value in re.findall(r'<input type="hidden" name="([^"]+)" value="([^"]*)"', html):
        fields.setdefault(name, []).append(value)
    return fields


@pytest.fixture
def small_pages_and_batches(monkeypatch: pytest.MonkeyPatch) -> None:
    """A list page of 3 runs and batches of 2, so "select all" spans pages and batches."""
    runs_admin = admin.site._registry[JobRun]
    monkeypatch.setattr(runs_admin, "list_per_page", 3)
    monkeypatch.setattr(runs_admin, "bulk_batch_size", 2)


@pytest.mark.usefixtures("small_pages_and_batches")
def test_select_all_retries_every_run_of_the_filter_after_confirming(
    admin_client: Client,
) -> None:
    charge = [
        JobRunFactory.create(job_name="shop.charge", status=RunStatus.FAILED) for _ in range(5)
    ]
    JobRunFactory.create(job_name="shop.charge", status=RunStatus.SUCCEEDED)
    refund = JobRunFactory.create(job_name="shop.refund", status=RunStatus.FAILED)
    filtered = f"{CHANGELIST}?job_name=shop.charge"
    on_page = [str(r.pk) for r in charge[:3]]
    picked = {
        "action": "retry_runs",
        "select_across": "1",
        "index": "0",
        "_selected_action": on_page,
    }
    page = admin_client.post(filtered, picked)
    html = page.content.decode()
    assert page.status_code == 200
    assert "6 runs selected, every run of the current filter." in html
    assert "It will touch <strong>5 runs</strong>" in html
    assert "the other 1 is in a status it does not apply to" in html
    assert JobRun.objects.filter(status=RunStatus.FAILED).count() == 6  # not yet
    form = hidden_fields(html)
    assert form["select_across"] == ["1"] and form["confirmed"] == ["yes"]
    done = admin_client.post(
        filtered, {k: v if k == "_selected_action" else v[0] for k, v in form.items()}, follow=True
    )
    text = done.content.decode()
    assert "5 runs retried." in text
    assert "1 run skipped: only failed or cancelled runs can be retried." in text
    assert set(
        JobRun.objects.filter(pk__in=[r.pk for r in charge]).values_list("status", flat=True)
    ) == {RunStatus.QUEUED}
    refund.refresh_from_db()
    assert refund.status == RunStatus.FAILED  # outside the filter
    assert sorted(str(pk) for pk in LogEntry.objects.values_list("object_id", flat=True)) == sorted(
        str(r.pk) for r in charge
    )


@pytest.mark.usefixtures("small_pages_and_batches")
def test_select_all_cancel_by_status_filter(admin_client: Client) -> None:
    queued = [JobRunFactory.create(status=RunStatus.QUEUED) for _ in range(4)]
    JobRunFactory.create(status=RunStatus.FAILED)
    form = {
        "action": "cancel_runs",
        "select_across": "1",
        "index": "0",
        "_selected_action": [str(queued[0].pk)],
        "confirmed": "yes",
    }
    text = admin_client.post(f"{CHANGELIST}?status__exact=queued", form, follow=True)
    assert "4 runs cancelled." in text.content.decode()
    assert set(JobRun.objects.values_list("status", flat=True)) == {
        RunStatus.CANCELLED,
        RunStatus.FAILED,
    }


def test_select_all_needs_the_change_permission(
    client: Client, django_user_model: type[User]
) -> None:
    viewer = django_user_model.objects.create_user("viewer", password="pw", is_staff=True)
    viewer.user_permissions.add(Permission.objects.get(codename="view_jobrun"))
    client.force_login(viewer)
    run = JobRunFactory.create(status=RunStatus.FAILED)
    form = {
        "action": "retry_runs",
        "select_across": "1",
        "index": "0",
        "_selected_action": [str(run.pk)],
        "confirmed": "yes",
    }
    client.post(CHANGELIST, form, follow=True)
    run.refresh_from_db()
    assert run.status == RunStatus.FAILED and not LogEntry.objects.exists()


def test_a_cancel_counts_the_selected_children_cancelled_with_their_parent(
    admin_client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A batch a run: the child's batch comes after its parent's.
    monkeypatch.setattr(admin.site._registry[JobRun], "bulk_batch_size", 1)
    parent = JobRunFactory.create(id=FIRST, status=RunStatus.QUEUED)
    child = JobRunFactory.create(id=LAST, status=RunStatus.WAITING, parent=parent)
    picked = {
        "action": "cancel_runs",
        "index": "0",
        "_selected_action": [str(parent.pk), str(child.pk)],
        "confirmed": "yes",
    }
    done = admin_client.post(CHANGELIST, picked, follow=True)
    text = done.content.decode()
    assert "2 runs cancelled (1 along with a parent run selected too)." in text
    assert "skipped:" not in text
    assert set(JobRun.objects.values_list("status", flat=True)) == {RunStatus.CANCELLED}
