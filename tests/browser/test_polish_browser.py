"""In real headless Chromium: a retried step's "took" is its last execution, the runs
list shows a waiting run's deadline, the run page's buttons ask first (the operator
reads what will run again, then says yes), and the retried run's timeline leaves the
idle time before the retry empty (no bar of the failed attempt across it)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from django_durable_jobs.admin import times
from django_durable_jobs.engine.clock import FakeClock
from django_durable_jobs.models import JobRun, RunStatus, StepStatus
from django_durable_jobs.observe import trace
from tests.browser.test_admin_browser import browser, click_and_load, log_in
from tests.factories import T0, JobRunFactory, StepRecordFactory

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
__all__ = ["browser"]  # the fixture

DEADLINE = T0 + timedelta(days=7)
FAILED_AT = T0 + timedelta(seconds=62)


def runs_for_the_page(clock: FakeClock) -> tuple[JobRun, JobRun]:
    clock.set(T0 + timedelta(minutes=5))
    failed = JobRunFactory.create(
        job_name="tests.ops.fragile",
        status=RunStatus.FAILED,
        error="boom",
        started_at=T0,
        finished_at=FAILED_AT,
    )
    StepRecordFactory.create(run=failed, name="one", started_at=T0, completed_at=T0)
    # Four failed attempts over a minute, then a 1 ms fifth one.
    StepRecordFactory.create(
        run=failed,
        name="flaky",
        attempts=5,
        started_at=T0,
        last_started_at=T0 + timedelta(seconds=61),
        completed_at=T0 + timedelta(seconds=61, milliseconds=1),
    )
    StepRecordFactory.create(
        run=failed, name="send-email", status=StepStatus.FAILED, completed_at=None, output=None
    )
    waiting = JobRunFactory.create(
        status=RunStatus.WAITING, wake_at=T0 + timedelta(minutes=5, seconds=30)
    )
    StepRecordFactory.create(
        run=waiting,
        name="wait-order",
        kind="wait",
        status=StepStatus.WAITING,
        completed_at=None,
        output=None,
        event="order.paid",
        wake_at=waiting.wake_at,
        deadline=DEADLINE,
    )
    return failed, waiting


def test_took_deadline_and_a_retry_that_asks_first(
    browser: Any, live_server: Any, django_user_model: Any, clock: FakeClock
) -> None:
    from selenium.webdriver.common.by import By

    failed, waiting = runs_for_the_page(clock)
    log_in(browser, live_server, django_user_model)
    admin = f"{live_server.url}/admin/django_durable_jobs/jobrun/"

    browser.get(admin)
    row = browser.find_element(By.XPATH, f"//tr[.//a[contains(@href, '{waiting.pk}')]]")
    wakes = row.find_element(By.CSS_SELECTOR, ".field-wakes").text
    assert wakes.startswith(f"by {times.shown(DEADLINE)}"), wakes

    browser.get(f"{admin}{failed.pk}/change/")
    flaky = browser.find_element(By.CSS_SELECTOR, '[data-step="flaky"] .djdj-took')
    assert flaky.text == trace.short_duration(timedelta(milliseconds=1))

    click_and_load(
        browser,
        browser.find_element(By.XPATH, "//form[contains(@class, 'djdj-tool')]//button[.='Retry']"),
    )
    page = browser.find_element(By.ID, "content-main").text
    assert "1 step runs again" in page and "send-email" in page
    assert "2 completed steps replay from storage" in page
    assert JobRun.objects.get(pk=failed.pk).status == RunStatus.FAILED  # not yet
    clock.advance("2h")  # the operator said yes two hours after the failure
    click_and_load(
        browser, browser.find_element(By.CSS_SELECTOR, "input[type=submit][value='Yes, retry']")
    )
    assert "Retried the run" in browser.find_element(By.CSS_SELECTOR, ".messagelist").text
    assert JobRun.objects.get(pk=failed.pk).status == RunStatus.QUEUED

    # The run page: the failed attempt's bar ends at the failure, the two idle hours
    # are a labelled gap, and the retry's bar starts after them.
    browser.get(f"{admin}{failed.pk}/change/")
    row = browser.find_element(By.CSS_SELECTOR, ".djdj-run-row")
    attempt = row.find_element(By.CSS_SELECTOR, ".djdj-bar--attempt.djdj-bar--failed").rect
    gap = row.find_element(By.CSS_SELECTOR, ".djdj-gap")
    again = row.find_element(By.CSS_SELECTOR, ".djdj-bar--queued").rect
    label = "retried by operator after 2h3m"  # 2h3m58s
    assert gap.text == label and label in row.find_element(By.CSS_SELECTOR, ".djdj-info").text
    assert attempt["x"] + attempt["width"] <= gap.rect["x"] + 1, (attempt, gap.rect)
    assert gap.rect["width"] > 10 * attempt["width"], (attempt, gap.rect)
    assert again["x"] >= gap.rect["x"] + gap.rect["width"] - 1, (again, gap.rect)
