"""Replay from a step and the list actions ask first, saying what will run again
(Django asks before a delete); nothing changes until the operator says yes."""

from __future__ import annotations

import re

import pytest
from django.contrib.admin.models import LogEntry
from django.test import Client
from django.urls import reverse

from django_durable_jobs.models import JobRun, RunStatus
from tests.conftest import Driver
from tests.factories import JobRunFactory
from tests.testapp.admin_jobs import fragile

pytestmark = pytest.mark.django_db

CHANGELIST = reverse("admin:django_durable_jobs_jobrun_changelist")


def replay_url(run: JobRun) -> str:
    return reverse(
        "admin:django_durable_jobs_jobrun_operate", kwargs={"object_id": run.pk, "verb": "replay"}
    )


def hidden_fields(html: str) -> dict[str, list[str]]:
    fields: dict[str, list[str]] = {}
    for name, value in re.findall(r'<input type="hidden" name="([^"]+)" value="([^"]*)"', html):
        fields.setdefault(name, []).append(value)
    return fields


def test_replay_asks_first_and_names_what_runs_again(admin_client: Client, driver: Driver) -> None:
    run = fragile.enqueue()
    driver.step()
    steps = list(run.steps.values_list("name", flat=True))
    assert steps == ["one", "two", "three"]
    page = admin_client.post(replay_url(run), {"step": "two"})
    html = page.content.decode()
    assert page.status_code == 200
    assert "2 steps forgotten and run again" in html
    assert "<li><code>two</code></li><li><code>three</code></li>" in html
    assert "1 step before it replays from storage" in html
    assert list(run.steps.values_list("name", flat=True)) == steps  # nothing happened
    assert not LogEntry.objects.exists()
    # The page's own form does it.
    form = hidden_fields(html)
    assert form["step"] == ["two"] and form["confirmed"] == ["yes"]
    admin_client.post(replay_url(run), {k: v[0] for k, v in form.items()})
    assert list(run.steps.values_list("name", flat=True)) == ["one"]
    assert LogEntry.objects.get().get_change_message() == "Replayed from step 'two'"


def test_replay_of_an_unknown_step_says_so(admin_client: Client, driver: Driver) -> None:
    run = fragile.enqueue()
    driver.step()
    html = admin_client.post(replay_url(run), {"step": "zwei"}).content.decode()
    assert "has no step <code>zwei</code>" in html and 'name="confirmed"' not in html


def test_list_action_asks_first_then_acts_on_yes(admin_client: Client) -> None:
    failed = [JobRunFactory.create(status=RunStatus.FAILED) for _ in range(3)]
    picked = {"action": "retry_runs", "_selected_action": [str(r.pk) for r in failed]}
    page = admin_client.post(CHANGELIST, picked)
    html = page.content.decode()
    assert page.status_code == 200
    assert "Retry the selected runs: 3 runs selected." in html
    assert "completed steps replay from storage, the failed step runs again" in html
    assert {r.status for r in JobRun.objects.all()} == {RunStatus.FAILED}  # not yet
    form = hidden_fields(html)
    assert sorted(form["_selected_action"]) == sorted(picked["_selected_action"])
    done = admin_client.post(
        CHANGELIST,
        {"action": "retry_runs", "_selected_action": form["_selected_action"], "confirmed": "yes"},
        follow=True,
    )
    assert "3 runs retried." in done.content.decode()
    assert {r.status for r in JobRun.objects.all()} == {RunStatus.QUEUED}
