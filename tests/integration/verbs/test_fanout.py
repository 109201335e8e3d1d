"""Fan-out on the fake clock: order, one wake-up, failure, timeout, replay."""

from __future__ import annotations

import json
from collections import Counter
from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import call_command
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from django_durable_jobs.db.claims import claim
from django_durable_jobs.engine.clock import FakeClock
from django_durable_jobs.models import JobRun, RunStatus, StepRecord, StepStatus
from tests.conftest import Driver
from tests.testapp import fanout_jobs
from tests.testapp.models import Effect

pytestmark = pytest.mark.django_db


def children(parent: JobRun) -> list[JobRun]:
    return sorted(JobRun.objects.filter(parent=parent), key=lambda run: run.args[0])


def fan_step(parent: JobRun, name: str = "squares") -> StepRecord:
    return StepRecord.objects.get(run=parent, name=name)


def test_children_start_in_one_step_and_results_come_back_in_order(
    clock: FakeClock, driver: Driver
) -> None:
    parent = fanout_jobs.squares.enqueue(5)
    driver.step(parent)  # starts the five children, then waits
    kids = children(parent)
    assert [kid.args for kid in kids] == [[n] for n in range(5)]
    assert {kid.status for kid in kids} == {RunStatus.QUEUED}
    parent.refresh_from_db()
    assert parent.status == RunStatus.WAITING
    for kid in reversed(kids):  # they finish in the reverse order
        driver.step(kid)
    driver.step(parent)
    parent.refresh_from_db()
    assert parent.status == RunStatus.SUCCEEDED
    assert parent.result == {"results": [0, 1, 4, 9, 16], "total": "total-30"}


@pytest.mark.postgres(reason="SQLite may split a bulk insert by its limit on parameters")
@pytest.mark.mariadb
def test_the_children_start_in_one_insert(clock: FakeClock, driver: Driver) -> None:
    """One round trip for N children (a bulk insert), not one per child."""
    parent = fanout_jobs.squares.enqueue(40)
    table = connection.ops.quote_name(JobRun._meta.db_table)
    with CaptureQueriesContext(connection) as queries:
        driver.step(parent)
    # INSERT INTO (PostgreSQL: ON CONFLICT DO NOTHING) or INSERT IGNORE INTO (MariaDB)
    inserts = [
        query["sql"]
        for query in queries
        if query["sql"].startswith("INSERT ") and f" INTO {table} (" in query["sql"][:80]
    ]
    assert len(inserts) == 1, inserts
    assert JobRun.objects.filter(parent=parent).count() == 40


def test_the_parent_is_woken_once_by_the_last_child(clock: FakeClock, driver: Driver) -> None:
    parent = fanout_jobs.squares.enqueue(4)
    driver.step(parent)
    parent.refresh_from_db()
    parked_until = parent.wake_at
    kids = children(parent)
    for kid in kids[:-1]:
        driver.step(kid)
        parent.refresh_from_db()
        assert parent.wake_at == parked_until  # not woken by the first three
    driver.step(kids[-1])
    parent.refresh_from_db()
    assert parent.wake_at == clock.now()  # woken by the last
    driver.drain()
    assert fan_step(parent).attempts == 1  # looked at twice (started, woken), run once


def test_a_fanout_counts_executions_not_looks(clock: FakeClock, driver: Driver) -> None:
    """As a wait does (unit/test_steps.py): the safety poll looks at the children every
    EVENT_POLL, and a fan-out of an hour showed 120 attempts. Only a retry runs it again."""
    from django_durable_jobs.verbs import runs

    parent = fanout_jobs.squares.enqueue(2, failing=[1])
    driver.step(parent)
    for _ in range(5):  # no child has finished: the parent wakes on its poll and parks
        clock.advance("30s")
        assert driver.step(parent) is not None
    assert fan_step(parent).attempts == 1  # before: 6
    for kid in children(parent):
        driver.step(kid)
    driver.step(parent)  # woken by the last child: child 1 failed, so the step fails
    step = fan_step(parent)
    assert (step.status, step.attempts) == (StepStatus.FAILED, 1)
    runs.retry(parent.pk)
    driver.drain()
    step = fan_step(parent)
    assert (step.status, step.attempts) == (StepStatus.FAILED, 2)  # the retry ran it again


def test_map_calls_the_job_with_each_item(clock: FakeClock, driver: Driver) -> None:
    parent = fanout_jobs.mapped.enqueue([3, 1, 2])
    driver.drain()
    parent.refresh_from_db()
    assert parent.result == [9, 1, 4]


def test_a_failed_child_fails_the_step_after_all_children_finished(
    clock: FakeClock, driver: Driver
) -> None:
    parent = fanout_jobs.squares.enqueue(4, failing=[1, 3])
    driver.step(parent)
    kids = children(parent)
    for kid in kids[:3]:  # children 0, 1 (failed) and 2
        driver.step(kid)
    parent.refresh_from_db()
    assert parent.status == RunStatus.WAITING  # child 3 has not finished yet
    driver.step(kids[3])
    driver.step(parent)
    parent.refresh_from_db()
    assert parent.status == RunStatus.FAILED and parent.error_code == "X_CHILD_FAILED"
    assert "2 of 4 child runs failed; the first is child 1" in parent.error
    assert str(kids[1].pk) in parent.error and "square 1 refuses" in parent.error
    assert fan_step(parent).status == StepStatus.FAILED


def test_children_that_do_not_finish_in_time_fail_the_step(
    clock: FakeClock, driver: Driver
) -> None:
    parent = fanout_jobs.slow.enqueue()
    driver.drain()
    parent.refresh_from_db()
    assert parent.status == RunStatus.WAITING  # the sleepy child sleeps for an hour
    clock.advance("11m")
    driver.drain()
    parent.refresh_from_db()
    assert parent.status == RunStatus.FAILED and parent.error_code == "X_JOB_TIMEOUT"
    assert "1 of 2 child runs did not finish within 10m" in parent.error


def test_a_replayed_parent_gets_stored_results_and_starts_no_child_again(
    clock: FakeClock, driver: Driver
) -> None:
    from tests.testapp import jobs

    jobs.FAIL_ONCE.add("total-14")  # the step after the fan-out fails once
    parent = fanout_jobs.squares.enqueue(4)
    driver.drain()
    parent.refresh_from_db()
    assert parent.status == RunStatus.SUCCEEDED and parent.attempt == 2
    assert JobRun.objects.filter(parent=parent).count() == 4
    effects = Counter(Effect.objects.values_list("name", flat=True))
    assert all(effects[f"square-{n}"] == 1 for n in range(4))  # each child ran once
    assert effects["total-14"] == 2  # the failed step ran again


def test_calls_must_be_job_call_values(clock: FakeClock, driver: Driver) -> None:
    parent = fanout_jobs.bad.enqueue()
    driver.drain()
    parent.refresh_from_db()
    assert parent.status == RunStatus.FAILED
    assert "item 1 is" in parent.error and "job.call(*args, **kwargs)" in parent.error
    assert not JobRun.objects.filter(parent=parent).exists()  # nothing started


def test_the_admin_timeline_and_jobs_show_give_progress_and_each_child(
    clock: FakeClock, driver: Driver, admin_client: Client
) -> None:
    parent = fanout_jobs.squares.enqueue(3)
    driver.step(parent)
    kids = children(parent)
    driver.step(kids[1])
    page = admin_client.get(reverse("admin:django_durable_jobs_jobrun_change", args=[parent.pk]))
    html = page.content.decode()
    assert "1 of 3 child runs finished" in html
    for kid in kids:
        url = reverse("admin:django_durable_jobs_jobrun_change", args=[kid.pk])
        assert f'href="{url}"' in html
    out = StringIO()
    call_command("jobs", "show", str(parent.pk), stdout=out)
    text = out.getvalue()
    assert "squares: 1 of 3 child runs finished" in text
    assert f"  1  {kids[1].pk}  succeeded" in text and f"  2  {kids[2].pk}  queued" in text
    out = StringIO()
    call_command("jobs", "show", str(parent.pk), "--json", stdout=out)
    (step,) = json.loads(out.getvalue())["steps"]
    assert [child["id"] for child in step["children"]] == [str(kid.pk) for kid in kids]


def test_fanned_out_children_keep_their_jobs_concurrency_limit(
    clock: FakeClock, driver: Driver
) -> None:
    """A child started by ``map``/``invoke_all`` is under its job's limit like any run."""
    parent = fanout_jobs.limited.enqueue([1, 2, 3, 4])
    driver.step(parent)
    kids = list(JobRun.objects.filter(parent=parent))
    assert [(kid.concurrency_key, kid.concurrency_limit) for kid in kids] == [("", 2)] * 4
    claimed = claim("w", now=clock.now(), lease=timedelta(minutes=1), limit=50)
    assert len(claimed) == 2  # before: all four ran at once


def test_retry_of_a_parent_runs_only_its_failed_children_again(
    clock: FakeClock, driver: Driver
) -> None:
    """``runs.retry`` lets go of the failed children of a fan-out (as of ``invoke``):
    the step starts new ones for them and keeps the children that succeeded."""
    from django_durable_jobs.verbs import runs

    parent = fanout_jobs.squares.enqueue(3, failing=[1])
    driver.drain()
    parent.refresh_from_db()
    assert parent.status == RunStatus.FAILED and parent.error_code == "X_CHILD_FAILED"
    runs.retry(parent.pk)
    driver.drain()
    ran = Counter(Effect.objects.values_list("name", flat=True))
    assert (ran["square-0"], ran["square-1"], ran["square-2"]) == (1, 2, 1)
    retried = [kid for kid in children(parent) if kid.args == [1]]
    assert [kid.status for kid in retried] == [RunStatus.FAILED, RunStatus.FAILED]


def test_retry_after_a_fanout_timed_out_waits_a_full_window_again(
    clock: FakeClock, driver: Driver
) -> None:
    from django_durable_jobs.verbs import runs

    parent = fanout_jobs.slow.enqueue()
    driver.drain()
    clock.advance("11m")
    driver.drain()
    parent.refresh_from_db()
    assert parent.status == RunStatus.FAILED and parent.error_code == "X_JOB_TIMEOUT"
    clock.advance("45m")  # the sleepy child wakes 4 minutes into the new window
    runs.retry(parent.pk)
    driver.drain()
    parent.refresh_from_db()
    assert parent.status == RunStatus.WAITING  # before: timed out again at once
    assert len(children(parent)) == 2  # the same children: none failed
    clock.advance("5m")
    driver.drain()
    parent.refresh_from_db()
    assert parent.status == RunStatus.SUCCEEDED and parent.result == [1, 4]


def test_a_fanned_out_child_is_cancelled_by_its_jobs_cancel_on_event(
    clock: FakeClock, driver: Driver
) -> None:
    from django_durable_jobs.verbs.events import publish_event

    parent = fanout_jobs.dunnings.enqueue([7, 8])
    driver.drain()  # the children sleep for three days
    publish_event("invoice.paid", key="7")
    statuses = {kid.args[0]: kid.status for kid in children(parent)}
    assert statuses == {7: RunStatus.CANCELLED, 8: RunStatus.SLEEPING}  # before: 7 slept on


def test_a_fan_out_of_a_rate_limited_job_is_refused_with_a_clear_error(
    clock: FakeClock, driver: Driver
) -> None:
    """Rate limits and debounces are decided at enqueue, one run at a time; a skipped
    child would leave its parent waiting for it until the step's timeout."""
    parent = fanout_jobs.rate_limited.enqueue()
    driver.drain()
    parent.refresh_from_db()
    assert parent.status == RunStatus.FAILED and parent.error_code == "X_STEP_USAGE"
    assert "'tests.welcome_once'" in parent.error and "rate_limit" in parent.error
    assert not JobRun.objects.filter(parent=parent).exists()
