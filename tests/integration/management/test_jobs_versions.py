"""Versions for operators: ``manage.py jobs versions [--json]``, the system check that
warns of unfinished runs of a version this deploy does not register (W032), and
``jobs show`` naming a run's version and the steps its finishing code never reached."""

from __future__ import annotations

import json
from datetime import timedelta
from io import StringIO
from typing import Any

import pytest
from django.core.checks import run_checks
from django.core.management import call_command

from django_durable_jobs.engine.clock import FakeClock
from django_durable_jobs.models import RunStatus
from tests.factories import JobRunFactory, StepRecordFactory

# Registers versions 1 and 2 of tests.rolling here, as a deploy that keeps both does.
from tests.testapp import rolling_v1, rolling_v2  # noqa: F401

pytestmark = pytest.mark.django_db

ROLLING = "tests.rolling"


def jobs_command(*args: str) -> str:
    out = StringIO()
    call_command("jobs", *args, stdout=out)
    return out.getvalue()


def unfinished(clock: FakeClock) -> None:
    now = clock.now()
    for age, status in ((60, RunStatus.QUEUED), (3600, RunStatus.SLEEPING)):
        JobRunFactory.create(
            job_name=ROLLING, job_version=1, status=status, created_at=now - timedelta(seconds=age)
        )
    JobRunFactory.create(job_name=ROLLING, job_version=2, status=RunStatus.WAITING)
    JobRunFactory.create(job_name=ROLLING, job_version=2, status=RunStatus.SUCCEEDED)
    JobRunFactory.create(job_name="tests.gone", job_version=3, status=RunStatus.QUEUED)


def test_versions_lists_each_version_with_its_unfinished_runs(clock: FakeClock) -> None:
    unfinished(clock)
    rows = {
        (r["job_name"], r["version"]): r for r in json.loads(jobs_command("versions", "--json"))
    }
    assert rows[(ROLLING, 1)] == {
        "job_name": ROLLING,
        "version": 1,
        "registered": True,
        "unfinished": 2,
        "oldest_age_seconds": 3600.0,
    }
    assert (rows[(ROLLING, 2)]["unfinished"], rows[(ROLLING, 2)]["registered"]) == (1, True)
    assert rows[("tests.gone", 3)]["registered"] is False
    assert rows[("tests.noop", 1)] == {
        "job_name": "tests.noop",
        "version": 1,
        "registered": True,
        "unfinished": 0,
        "oldest_age_seconds": None,
    }
    text = jobs_command("versions")
    assert text.splitlines()[0].split() == ["job", "version", "registered", "unfinished", "oldest"]
    assert [line.split() for line in text.splitlines() if line.startswith(f"{ROLLING} ")] == [
        [ROLLING, "1", "yes", "2", "1h"],
        [ROLLING, "2", "yes", "1", "0ms"],
    ]
    assert (
        "tests.gone version 3: 1 unfinished run(s) this deploy cannot execute; keep "
        "@job(version=...) of it until they finish"
    ) in text


@pytest.mark.django_db(databases=["default", "other", "jobs"])  # Django's checks ask each
def test_unfinished_runs_of_a_version_this_deploy_lacks_are_a_warning(clock: FakeClock) -> None:
    unfinished(clock)
    JobRunFactory.create(job_name="tests.gone", job_version=3, status=RunStatus.FAILED)
    warnings = [m for m in run_checks(databases=["default"]) if m.id == "django_durable_jobs.W032"]
    assert [w.msg for w in warnings] == [
        "the jobs database holds 1 unfinished run(s) of job 'tests.gone' version 3, which "
        "this deploy does not register"
    ]
    assert "Keep @job(name='tests.gone', version=3)" in str(warnings[0].hint)
    # Not without the database, as Django's database checks go.
    assert not [m for m in run_checks() if m.id == "django_durable_jobs.W032"]


def test_show_names_the_version_and_the_steps_not_reached(clock: FakeClock) -> None:
    run = JobRunFactory.create(
        job_name=ROLLING,
        job_version=2,
        status=RunStatus.SUCCEEDED,
        started_at=clock.now(),
        finished_at=clock.now(),
        unreached_steps=["two"],
    )
    for name in ("one", "two", "two-v2"):
        StepRecordFactory.create(run=run, name=name)
    text = jobs_command("show", str(run.pk))
    assert text.splitlines()[0].endswith("queue default  version 2")
    assert text.splitlines()[-2:] == [
        "steps not reached by the code that finished this run (renamed or removed by a "
        "deploy while it was in flight):",
        "  two",
    ]
    (row,) = [line for line in text.splitlines() if line.startswith("2  two ")]
    assert "not reached" in row
    data: dict[str, Any] = json.loads(jobs_command("show", str(run.pk), "--json"))
    assert (data["job_version"], data["unreached_steps"]) == (2, ["two"])
    assert [step["unreached"] for step in data["steps"]] == [False, True, False]
