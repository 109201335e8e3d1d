"""The run page's retry, cancel and wake buttons ask first, on a page that says what
will happen to the run (for a retry: which steps run again, which replay, which child
runs start again; for a cancel: the children cancelled with it). Nothing changes until
the operator says yes, through the page's own form."""

from __future__ import annotations

import pytest
from django.contrib.admin.models import LogEntry
from django.test import Client
from django.urls import reverse

from django_durable_jobs.models import JobRun, RunStatus
from tests.conftest import Driver
from tests.integration.admin.test_admin import failed_run
from tests.integration.admin.test_confirm import hidden_fields
from tests.testapp import fanout_jobs
from tests.testapp.admin_jobs import napper

pytestmark = pytest.mark.django_db


def operate(run: JobRun, verb: str) -> str:
    return reverse(
        "admin:django_durable_jobs_jobrun_operate", kwargs={"object_id": run.pk, "verb": verb}
    )


def asked(client: Client, run: JobRun, verb: str) -> str:
    before = JobRun.objects.values().get(pk=run.pk)
    page = client.post(operate(run, verb))
    assert page.status_code == 200
    assert JobRun.objects.values().get(pk=run.pk) == before  # nothing happened
    assert not LogEntry.objects.exists()
    return page.content.decode()


def say_yes(client: Client, run: JobRun, verb: str, html: str) -> None:
    form = hidden_fields(html)
    assert form["confirmed"] == ["yes"]
    response = client.post(operate(run, verb), {k: v[0] for k, v in form.items()})
    assert response.status_code == 302


def test_retry_asks_first_and_names_the_steps_that_run_again(
    admin_client: Client, driver: Driver
) -> None:
    run = failed_run(driver)  # "one" completed, "two" failed
    html = asked(admin_client, run, "retry")
    assert "Retry?" in html
    assert "1 step runs again" in html and "<li><code>two</code></li>" in html
    assert "1 completed step replays from storage" in html and "<code>one</code>" in html
    say_yes(admin_client, run, "retry", html)
    assert JobRun.objects.get(pk=run.pk).status == RunStatus.QUEUED
    assert LogEntry.objects.get().get_change_message() == "Retried the run"


def test_retry_of_a_fan_out_names_the_children_that_start_again(
    admin_client: Client, driver: Driver
) -> None:
    parent = fanout_jobs.squares.enqueue(3, failing=[2])
    driver.drain()
    assert JobRun.objects.get(pk=parent.pk).status == RunStatus.FAILED
    failed = JobRun.objects.get(parent=parent, status=RunStatus.FAILED)
    html = asked(admin_client, parent, "retry")
    assert "1 failed or cancelled child run starts again" in html
    assert str(failed.pk) in html


def test_cancel_asks_first_and_names_the_children_cancelled_with_it(
    admin_client: Client, driver: Driver
) -> None:
    parent = fanout_jobs.squares.enqueue(2)
    driver.step(parent)
    kids = list(JobRun.objects.filter(parent=parent))
    html = asked(admin_client, parent, "cancel")
    assert "2 unfinished child runs" in html and all(str(kid.pk) in html for kid in kids)
    say_yes(admin_client, parent, "cancel", html)
    assert set(JobRun.objects.filter(parent=parent).values_list("status", flat=True)) == {
        RunStatus.CANCELLED
    }


def test_wake_asks_first(admin_client: Client, driver: Driver) -> None:
    run = napper.enqueue()
    driver.step()
    html = asked(admin_client, run, "wake")
    assert "Wake now?" in html and "a sleep ends now" in html
    say_yes(admin_client, run, "wake", html)
    assert LogEntry.objects.get().get_change_message() == "Woke the run"
