"""The runs list shows a waiting run's deadline (the step it waits in gives up then),
not its next safety poll, read in the list's own query (no query per row)."""

from __future__ import annotations

from datetime import datetime, timedelta
from io import StringIO

import pytest
from django.core.management import call_command
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from django_durable_jobs.admin import times
from django_durable_jobs.engine.clock import FakeClock
from django_durable_jobs.models import JobRun, RunStatus, StepStatus
from django_durable_jobs.observe.formatting import stamp
from tests.factories import T0, JobRunFactory, StepRecordFactory

pytestmark = pytest.mark.django_db

POLL = T0 + timedelta(minutes=5, seconds=30)
DEADLINE = T0 + timedelta(days=7)


def waiting(count: int) -> list[JobRun]:
    made = []
    for _ in range(count):
        run = JobRunFactory.create(status=RunStatus.WAITING, created_at=T0, wake_at=POLL)
        StepRecordFactory.create(run=run, name="first", status=StepStatus.COMPLETED)
        StepRecordFactory.create(
            run=run,
            name="wait-order",
            kind="wait",
            status=StepStatus.WAITING,
            started_at=T0,
            completed_at=None,
            wake_at=POLL,
            deadline=DEADLINE,
            event="order.paid",
        )
        made.append(run)
    return made


def listed(client: Client) -> tuple[str, int]:
    with CaptureQueriesContext(connection) as queries:
        response = client.get(reverse("admin:django_durable_jobs_jobrun_changelist"))
    assert response.status_code == 200
    return response.content.decode(), len(queries)


def shown(when: datetime) -> str:
    """How the list shows a time (admin/times.when)."""
    return f'title="{when.isoformat()}">{times.shown(when)}</time>'


def test_a_waiting_run_shows_its_deadline_not_its_next_poll(
    clock: FakeClock, admin_client: Client
) -> None:
    clock.set(T0 + timedelta(minutes=5))
    (run,) = waiting(1)
    sleeping = JobRunFactory.create(status=RunStatus.SLEEPING, created_at=T0, wake_at=POLL)
    html, _ = listed(admin_client)
    assert f'by <time datetime="{DEADLINE.isoformat()}"' in html
    assert html.count(shown(DEADLINE)) == 1
    assert html.count(shown(POLL)) == 1  # the sleeping run's wake time only
    assert sleeping.pk != run.pk
    page = admin_client.get(reverse("admin:django_durable_jobs_jobrun_change", args=[run.pk]))
    assert f'by <time datetime="{DEADLINE.isoformat()}"' in page.content.decode()


def test_the_deadlines_cost_no_query_per_row(clock: FakeClock, admin_client: Client) -> None:
    clock.set(T0 + timedelta(minutes=5))
    waiting(2)
    _, few = listed(admin_client)
    waiting(20)
    html, many = listed(admin_client)
    assert html.count(f'by <time datetime="{DEADLINE.isoformat()}"') == 22
    assert many == few


def test_jobs_list_and_show_wake_as_the_admin_does(clock: FakeClock, admin_client: Client) -> None:
    """One meaning of "wakes" (observe/wakes.py) in the terminal and the admin: a waiting
    run's deadline, a sleeping run's wake time, nothing for a running run."""
    clock.set(T0 + timedelta(minutes=5))
    (run,) = waiting(1)
    JobRunFactory.create(status=RunStatus.SLEEPING, created_at=T0, wake_at=POLL)
    JobRunFactory.create(status=RunStatus.RUNNING, created_at=T0, wake_at=T0)
    out = StringIO()
    call_command("jobs", "list", stdout=out)
    header, *rows = out.getvalue().splitlines()
    assert "wakes" in header.split()
    cells = {row.split()[2]: row for row in rows}
    assert f"by {stamp(DEADLINE)}" in cells["waiting"]
    assert stamp(POLL) not in cells["waiting"]  # not its next safety poll
    assert stamp(POLL) in cells["sleeping"]
    assert cells["running"].count(stamp(T0)) == 1  # created, no wake time
    out = StringIO()
    call_command("jobs", "show", str(run.pk), stdout=out)
    assert f"wakes by {stamp(DEADLINE)}" in out.getvalue().splitlines()[1]
    html, _ = listed(admin_client)
    assert f'by <time datetime="{DEADLINE.isoformat()}"' in html
