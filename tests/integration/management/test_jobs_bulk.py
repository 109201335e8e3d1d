"""``manage.py jobs retry|cancel|replay`` over a filter instead of a run id."""

from __future__ import annotations

from io import StringIO
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from django_durable_jobs.engine.clock import FakeClock
from django_durable_jobs.models import JobRun, RunStatus, StepRecord
from tests.conftest import Driver
from tests.factories import FIRST, LAST, JobRunFactory
from tests.testapp.admin_jobs import fragile
from tests.testapp.jobs import FAIL_ONCE

pytestmark = pytest.mark.django_db


def jobs_command(*args: str, **options: Any) -> str:
    out = StringIO()
    call_command("jobs", *args, stdout=out, **options)
    return out.getvalue()


def by_status() -> dict[str, int]:
    counts: dict[str, int] = {}
    for status in JobRun.objects.values_list("status", flat=True):
        counts[status] = counts.get(status, 0) + 1
    return counts


def test_dry_run_prints_the_count_and_the_first_ids_and_changes_nothing(clock: FakeClock) -> None:
    runs = [JobRunFactory.create(status=RunStatus.FAILED) for _ in range(12)]
    JobRunFactory.create(status=RunStatus.SUCCEEDED)
    lines = jobs_command("retry", "--job", "tests.noop", "--dry-run").splitlines()
    assert lines[0] == "would retry 12 of 13 matching runs (1 in a status retry does not apply to)"
    first = lines[1].removeprefix("first: ").split()
    # The first 10 in the order it acts: the database's order of the ids (MariaDB's
    # UUID type sorts otherwise than the text).
    assert len(set(first)) == 10 and set(first) <= {str(r.pk) for r in runs}
    assert by_status() == {RunStatus.FAILED: 12, RunStatus.SUCCEEDED: 1}


def test_retry_by_filter_in_batches_reports_what_it_did(clock: FakeClock) -> None:
    for _ in range(5):
        JobRunFactory.create(status=RunStatus.FAILED, error_code="X_PROVIDER_DOWN")
    JobRunFactory.create(status=RunStatus.FAILED, error_code="X_OTHER")
    JobRunFactory.create(status=RunStatus.QUEUED, error_code="X_PROVIDER_DOWN")
    out = jobs_command("retry", "--error-code", "X_PROVIDER_DOWN", "--batch-size", "2")
    assert out == (
        "retried 5 of 6 matching runs in 3 batches; "
        "1 skipped (1 in a status retry does not apply to)\n"
    )
    assert by_status() == {RunStatus.QUEUED: 6, RunStatus.FAILED: 1}


def test_cancel_by_queue_and_status(clock: FakeClock) -> None:
    JobRunFactory.create(status=RunStatus.QUEUED, queue="mail")
    JobRunFactory.create(status=RunStatus.SLEEPING, queue="mail")
    JobRunFactory.create(status=RunStatus.QUEUED, queue="pay")
    out = jobs_command("cancel", "--queue", "mail", "--status", "queued", "--status", "sleeping")
    assert out == "cancelled 2 of 2 matching runs in 1 batch\n"
    assert set(JobRun.objects.filter(queue="mail").values_list("status", flat=True)) == {
        RunStatus.CANCELLED
    }


def test_since_counts_back_from_now(clock: FakeClock) -> None:
    JobRunFactory.create(status=RunStatus.FAILED)  # created at the clock's start
    clock.advance("2d")
    JobRunFactory.create(status=RunStatus.FAILED, created_at=clock.now())
    assert jobs_command("retry", "--since", "1d", "--dry-run").startswith("would retry 1 of 1 ")
    assert jobs_command("retry", "--since", "3d", "--dry-run").startswith("would retry 2 of 2 ")


def test_replay_by_filter_takes_the_step_alone(driver: Driver) -> None:
    FAIL_ONCE.add("fragile-three")
    run = fragile.enqueue()
    driver.step()
    out = jobs_command("replay", "--job", "tests.ops.fragile", "--status", "failed", "two")
    assert out == "replayed 1 of 1 matching run in 1 batch\n"
    assert list(StepRecord.objects.filter(run=run).values_list("name", flat=True)) == ["one"]


def test_a_dry_run_of_replay_says_which_runs_lack_the_step(driver: Driver) -> None:
    FAIL_ONCE.add("fragile-three")
    fragile.enqueue()
    driver.step()
    JobRunFactory.create(job_name="tests.ops.fragile", status=RunStatus.FAILED)
    JobRunFactory.create(job_name="tests.ops.fragile", status=RunStatus.RUNNING, lease_owner="w")
    out = jobs_command("replay", "--job", "tests.ops.fragile", "two", "--dry-run")
    assert out.splitlines()[0] == (
        "would replay 1 of 3 matching runs "
        "(1 in a status replay does not apply to, 1 without that step)"
    )
    assert by_status() == {RunStatus.FAILED: 2, RunStatus.RUNNING: 1}


def test_a_cancel_says_how_many_runs_went_along_with_a_parent_that_matched(
    clock: FakeClock,
) -> None:
    parent = JobRunFactory.create(id=FIRST, status=RunStatus.QUEUED)
    JobRunFactory.create(id=LAST, status=RunStatus.SLEEPING, parent=parent)
    out = jobs_command("cancel", "--job", "tests.noop", "--batch-size", "1")
    assert out == (
        "cancelled 2 of 2 matching runs in 1 batch (1 along with a parent run that matched too)\n"
    )


def test_a_filter_matching_nothing_says_so_and_succeeds(clock: FakeClock) -> None:
    JobRunFactory.create(status=RunStatus.FAILED)
    assert jobs_command("retry", "--queue", "nowhere") == "no runs match\n"
    assert jobs_command("cancel", "--queue", "nowhere", "--dry-run") == "no runs match\n"


def test_an_unregistered_job_gets_a_note_and_its_runs_can_still_be_cancelled(
    clock: FakeClock,
) -> None:
    JobRunFactory.create(job_name="shop.gone", status=RunStatus.QUEUED)
    out = jobs_command("cancel", "--job", "shop.gone")
    assert out.splitlines() == [
        "note: no job named 'shop.gone' is registered here",
        "cancelled 1 of 1 matching run in 1 batch",
    ]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ("retry", "--status", "faild"),
            "unknown status 'faild'; the statuses are: queued, running, sleeping, waiting, ",
        ),
        (("retry", "--since", "3 days"), "invalid duration '3 days'"),
        (
            ("retry", "3f2a9c1e-0000-4000-8000-000000000000", "--job", "x"),
            "give a run id or a filter .*, not both",
        ),
        (("cancel",), "give a run id, or a filter"),
        (("replay", "a", "b", "c"), "replay takes RUN_ID STEP, or STEP with a filter"),
        (("retry", "--job", "x", "--batch-size", "0"), "--batch-size must be at least 1"),
    ],
)
def test_mistakes_are_one_clear_line(args: tuple[str, ...], message: str) -> None:
    with pytest.raises(CommandError, match=message):
        jobs_command(*args)
