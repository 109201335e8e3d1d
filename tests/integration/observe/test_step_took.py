"""A step's "took" is its latest execution's duration: a step that failed once and
succeeded a minute later (on retry) took no time, not the minute since its first start.
Its first start stays: deadlines and the timeline's bar count from it."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.test import Client
from django.urls import reverse

from django_durable_jobs.engine.clock import FakeClock
from django_durable_jobs.models import JobRun, RunStatus, StepRecord
from django_durable_jobs.observe import trace
from tests.conftest import Driver
from tests.testapp import jobs

pytestmark = pytest.mark.django_db


def test_took_is_the_last_execution_after_a_retry(
    clock: FakeClock, driver: Driver, admin_client: Client
) -> None:
    jobs.FAIL_ONCE.add("three")
    run = jobs.three_steps.enqueue(user_id=1)
    first_start = clock.now()
    driver.step(run)  # "three" fails
    clock.advance("1m")
    retried_at = clock.now()
    driver.step(run)  # and succeeds a minute later, at once
    assert JobRun.objects.get(pk=run.pk).status == RunStatus.SUCCEEDED
    step = StepRecord.objects.get(run=run, name="three")
    assert step.attempts == 2
    assert step.started_at == first_start  # the first start stays
    assert step.last_started_at == retried_at
    row = {row.name: row for row in trace.load(run).steps}["three"]
    assert row.took == timedelta(0)
    html = admin_client.get(
        reverse("admin:django_durable_jobs_jobrun_change", args=[run.pk])
    ).content.decode()
    shown = re.search(r'data-step="three".*?class="djdj-took">([^<]*)<', html, re.S)
    assert shown is not None and shown.group(1) == trace.short_duration(timedelta(0))


def test_a_step_run_once_took_from_its_only_start(clock: FakeClock, driver: Driver) -> None:
    run = jobs.three_steps.enqueue(user_id=2)
    driver.step(run)
    step = StepRecord.objects.get(run=run, name="one")
    assert step.last_started_at == step.started_at
