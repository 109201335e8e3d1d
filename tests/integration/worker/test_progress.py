"""``ctx.set_progress`` through the worker's execution: the value is stored on the run
(``JobRun.progress``), last write wins, fenced by the lease, not a step; a tight loop
costs no round trip per call; the admin and ``jobs show`` show it."""

from __future__ import annotations

import json
from io import StringIO

import pytest
from django.core.management import call_command
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from django_durable_jobs.engine.clock import FakeClock
from django_durable_jobs.models import JobRun, RunStatus, StepRecord
from tests.conftest import Driver
from tests.testapp import message_jobs

pytestmark = pytest.mark.django_db


def _sets_progress(sql: str) -> bool:
    """An UPDATE that writes the progress column (``db/progress.py``)."""
    return sql.startswith("UPDATE") and ' SET "progress" = ' in sql.replace("`", '"')


def test_a_tight_loop_writes_its_progress_twice_whatever_its_length(driver: Driver) -> None:
    run = message_jobs.counting.enqueue(5000)
    with CaptureQueriesContext(connection) as queries:
        driver.step(run)
    run.refresh_from_db()
    assert run.status == RunStatus.SUCCEEDED
    assert run.progress == {"done": 5000, "total": 5000}  # the last value, at the stop
    writes = [q for q in queries.captured_queries if _sets_progress(q["sql"])]
    assert len(writes) == 2  # the first value at once, the last at the stop
    assert not StepRecord.objects.filter(run=run).exists()  # not a step


def test_progress_is_written_when_the_run_suspends_and_kept_across_attempts(
    driver: Driver, clock: FakeClock
) -> None:
    run = message_jobs.progress_then_sleep.enqueue()
    driver.step(run)
    run.refresh_from_db()
    assert (run.status, run.progress) == (RunStatus.SLEEPING, {"done": 1, "total": 2})
    clock.advance("1h")
    driver.step(run)
    run.refresh_from_db()
    assert (run.status, run.progress) == (RunStatus.SUCCEEDED, {"done": 2, "total": 2})


def test_an_async_job_s_progress_is_written_at_its_stop(driver: Driver) -> None:
    run = message_jobs.aprogress.enqueue()
    driver.step(run)
    run.refresh_from_db()
    assert (run.status, run.progress) == (RunStatus.SLEEPING, "half way")


def test_a_worker_that_lost_the_run_writes_no_progress(driver: Driver) -> None:
    from django_durable_jobs.db.progress import progress_writer

    run = message_jobs.counting.enqueue(1)
    JobRun.objects.filter(pk=run.pk).update(status=RunStatus.RUNNING, lease_owner="other")
    progress_writer(run, "default", owner="zombie")({"done": 1, "total": 1})
    run.refresh_from_db()
    assert run.progress is None


def test_the_run_page_draws_a_bar_and_the_list_a_small_one_under_the_status(
    admin_client: Client, driver: Driver
) -> None:
    run = message_jobs.progress_then_sleep.enqueue()
    driver.step(run)
    page = admin_client.get(reverse("admin:django_durable_jobs_jobrun_change", args=[run.pk]))
    html = page.content.decode()
    assert '<progress value="1.0" max="2.0" aria-label="progress">50%</progress>' in html
    assert "1 of 2 (50%)" in html
    listed = admin_client.get(reverse("admin:django_durable_jobs_jobrun_changelist"))
    assert 'class="djdj-progress--cell" value="1.0" max="2.0"' in listed.content.decode()


def test_a_progress_without_done_and_total_shows_as_json_escaped(
    admin_client: Client, driver: Driver
) -> None:
    run = message_jobs.aprogress.enqueue()
    driver.step(run)
    JobRun.objects.filter(pk=run.pk).update(progress={"stage": "<b>parsing</b>"})
    page = admin_client.get(reverse("admin:django_durable_jobs_jobrun_change", args=[run.pk]))
    html = page.content.decode()
    assert "&lt;b&gt;parsing&lt;/b&gt;" in html and "<b>parsing</b>" not in html
    assert "<progress value" not in html


def test_jobs_show_prints_the_progress_and_its_json(driver: Driver) -> None:
    run = message_jobs.progress_then_sleep.enqueue()
    driver.step(run)
    out = StringIO()
    call_command("jobs", "show", str(run.pk), stdout=out)
    assert "progress 1 of 2 (50%)" in out.getvalue().splitlines()
    out = StringIO()
    call_command("jobs", "show", str(run.pk), "--json", stdout=out)
    assert json.loads(out.getvalue())["progress"] == {"done": 1, "total": 2}
