"""The runs admin through the real admin client: as a superuser, a view-only staff
user and an anonymous visitor. Operating a run goes through ``runs.py``."""

from __future__ import annotations

import re
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.contrib.admin.models import CHANGE, LogEntry
from django.contrib.auth.models import Permission, User
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

import django_durable_jobs
from django_durable_jobs.admin.display import BADGES
from django_durable_jobs.engine.clock import FakeClock, current
from django_durable_jobs.models import JobRun, RunStatus, StepRecord, StepStatus, WorkerStatus
from tests.conftest import Driver
from tests.factories import T0, JobRunFactory, StepRecordFactory
from tests.testapp import jobs
from tests.testapp.admin_jobs import chatty, fragile, napper, shouty

pytestmark = pytest.mark.django_db

CSS = Path(django_durable_jobs.__file__).parent / "static" / "django_durable_jobs" / "timeline.css"
CHANGELIST = "admin:django_durable_jobs_jobrun_changelist"


def change_url(run: JobRun) -> str:
    return reverse("admin:django_durable_jobs_jobrun_change", args=[run.pk])


#: The run page's buttons ask first; this is the "Yes" on their confirmation page.
YES = {"confirmed": "yes"}


def operate_url(run: JobRun, verb: str) -> str:
    return reverse(
        "admin:django_durable_jobs_jobrun_operate", kwargs={"object_id": run.pk, "verb": verb}
    )


@pytest.fixture
def viewer(django_user_model: type[User]) -> Client:
    """A staff user who may view runs and events, and nothing else."""
    user = django_user_model.objects.create_user("viewer", password="pw", is_staff=True)
    user.user_permissions.set(
        Permission.objects.filter(
            content_type__app_label="django_durable_jobs", codename__startswith="view_"
        )
    )
    client = Client()
    client.force_login(user)
    return client


def failed_run(driver: Driver) -> JobRun:
    jobs.FAIL_ONCE.add("fragile-two")
    run = fragile.enqueue()
    driver.step()
    run.refresh_from_db()
    assert run.status == RunStatus.FAILED
    return run


# -- badges ------------------------------------------------------------------------------


def test_every_status_has_a_badge_with_a_style() -> None:
    statuses = (
        set(RunStatus.values) | {status.value for status in StepStatus} | set(WorkerStatus.values)
    )
    assert statuses <= set(BADGES)
    css = CSS.read_text()
    for status in statuses:
        assert f".{BADGES[status]}" in css, f"no CSS for the {status} badge"
        assert BADGES[status] == f"djdj-badge--{status}"  # the timeline template relies on it


# -- the list ----------------------------------------------------------------------------


def test_list_shows_badges_attempts_and_durations(admin_client: Client) -> None:
    JobRunFactory.create(
        job_name="tests.ops.fragile",
        status=RunStatus.SUCCEEDED,
        attempt=1,
        started_at=T0,
        finished_at=T0 + timedelta(seconds=90),
    )
    JobRunFactory.create(job_name="renamed.job", status=RunStatus.QUEUED)
    page = admin_client.get(reverse(CHANGELIST)).content.decode()
    assert 'class="djdj-badge djdj-badge--succeeded"' in page
    assert 'class="djdj-badge djdj-badge--queued"' in page
    assert "1 / 1" in page  # tests.ops.fragile has no retries
    # A job this process does not know: its attempt alone, no "/ ?".
    assert '<td class="field-attempts">0</td>' in page and "/ ?" not in page
    assert "1m30s" in page


def test_list_query_count_does_not_grow_with_runs(
    admin_client: Client, django_assert_num_queries: Any
) -> None:
    for status in RunStatus.values:
        JobRunFactory.create_batch(14, status=status, job_name=f"job.{status}", queue=status)
    JobRunFactory.create_batch(2)
    assert JobRun.objects.count() == 14 * len(RunStatus.values) + 2
    current().now()  # the database's clock measures its offset once a minute, not per page
    # Session, user, count, the page, the date hierarchy (2), the job, version and queue
    # filters, the schedules of the schedule filter.
    with django_assert_num_queries(10):
        assert admin_client.get(reverse(CHANGELIST)).status_code == 200


@pytest.mark.parametrize(
    ("term", "found"),
    [
        ("ops.nap", {"napper"}),
        ("OPS.Nap", {"napper"}),  # job names whatever the case, on every database
        ("order-7", {"keyed"}),
        ("order", set()),  # idempotency keys match exactly
    ],
)
def test_search_by_job_and_idempotency_key(
    admin_client: Client, term: str, found: set[str]
) -> None:
    runs = {
        "napper": JobRunFactory.create(job_name="tests.ops.napper"),
        "keyed": JobRunFactory.create(job_name="tests.noop", idempotency_key="order-7"),
    }
    page = admin_client.get(reverse(CHANGELIST), {"q": term}).content.decode()
    assert {name for name, run in runs.items() if str(run.pk)[:8] in page} == found


def test_search_by_run_id_or_its_start(admin_client: Client) -> None:
    wanted, other = JobRunFactory.create(), JobRunFactory.create()
    for term in (str(wanted.pk), str(wanted.pk)[:8], str(wanted.pk).upper()[:13]):
        page = admin_client.get(reverse(CHANGELIST), {"q": term}).content.decode()
        assert str(wanted.pk)[:8] in page and str(other.pk)[:8] not in page, term


def test_filter_by_status(admin_client: Client) -> None:
    failed = JobRunFactory.create(status=RunStatus.FAILED)
    queued = JobRunFactory.create(status=RunStatus.QUEUED)
    page = admin_client.get(reverse(CHANGELIST), {"status__exact": "failed"}).content.decode()
    assert str(failed.pk)[:8] in page and str(queued.pk)[:8] not in page


# -- the run page ------------------------------------------------------------------------


def test_run_page_shows_the_timeline(admin_client: Client, driver: Driver) -> None:
    run = failed_run(driver)
    page = admin_client.get(change_url(run)).content.decode()
    assert 'class="djdj-timeline"' in page and "timeline.css" in page
    names = re.findall(r'data-step="([^"]+)"', page)
    assert names == ["one", "two"]
    assert "RuntimeError: injected failure in fragile-two" in page
    assert "<summary>traceback</summary>" in page
    assert 'name="_save"' not in page  # read-only: nothing to save


def test_outputs_and_errors_are_escaped(admin_client: Client, driver: Driver) -> None:
    run = shouty.enqueue()
    driver.step()
    page = admin_client.get(change_url(run)).content.decode()
    assert "<script>alert" not in page
    assert "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt;" in page  # the step output
    assert "&lt;b&gt;bold&lt;/b&gt;" in page  # the run's error


def test_run_page_with_200_steps(admin_client: Client, driver: Driver) -> None:
    run = chatty.enqueue(200)
    driver.step()
    # Django caches content types on the first admin page a process shows (one query
    # more then): warm it up, or the count depends on which test ran first.
    admin_client.get(change_url(run))
    with CaptureQueriesContext(connection) as queries:
        page = admin_client.get(change_url(run)).content.decode()
    assert page.count('class="djdj-step ') == 200
    assert len(queries) <= 10  # one query for all the steps
    small = chatty.enqueue(2)
    driver.step()
    with CaptureQueriesContext(connection) as few:
        admin_client.get(change_url(small))
    assert len(few) == len(queries)


def test_superuser_sees_the_buttons_that_apply(admin_client: Client, driver: Driver) -> None:
    run = failed_run(driver)
    page = admin_client.get(change_url(run)).content.decode()
    assert operate_url(run, "retry") in page
    assert operate_url(run, "cancel") not in page  # a failed run cannot be cancelled
    assert operate_url(run, "replay") in page
    sleeping = napper.enqueue()
    driver.step()
    page = admin_client.get(change_url(sleeping)).content.decode()
    assert operate_url(sleeping, "wake") in page and operate_url(sleeping, "cancel") in page
    assert operate_url(sleeping, "retry") not in page


def test_wake_is_offered_for_a_queued_run_only_while_it_is_scheduled(
    admin_client: Client, clock: FakeClock
) -> None:
    due = JobRunFactory.create(status=RunStatus.QUEUED, wake_at=clock.now())
    later = JobRunFactory.create(status=RunStatus.QUEUED, wake_at=clock.now() + timedelta(hours=1))
    assert operate_url(due, "wake") not in admin_client.get(change_url(due)).content.decode()
    assert operate_url(later, "wake") in admin_client.get(change_url(later)).content.decode()


# -- operating from the run page ---------------------------------------------------------


def test_retry_button_retries_and_logs(admin_client: Client, driver: Driver) -> None:
    run = failed_run(driver)
    response = admin_client.post(operate_url(run, "retry"), YES)
    assert response.status_code == 302 and response["Location"] == change_url(run)
    run.refresh_from_db()
    assert run.status == RunStatus.QUEUED
    entry = LogEntry.objects.get()
    assert entry.action_flag == CHANGE and entry.object_id == str(run.pk)
    assert entry.get_change_message() == "Retried the run"
    driver.step()
    run.refresh_from_db()
    assert run.status == RunStatus.SUCCEEDED


def test_cancel_and_wake_buttons(admin_client: Client, driver: Driver, clock: FakeClock) -> None:
    run = napper.enqueue()
    driver.step()
    admin_client.post(operate_url(run, "wake"), YES)
    run.refresh_from_db()
    assert run.wake_at == clock.now()
    admin_client.post(operate_url(run, "cancel"), YES)
    run.refresh_from_db()
    assert run.status == RunStatus.CANCELLED
    assert [e.get_change_message() for e in LogEntry.objects.order_by("id")] == [
        "Woke the run",
        "Cancelled the run",
    ]


def test_replay_from_a_step_button(admin_client: Client, driver: Driver) -> None:
    run = fragile.enqueue()
    driver.step()
    admin_client.post(operate_url(run, "replay"), {"step": "two", "confirmed": "yes"})
    assert list(run.steps.values_list("name", flat=True)) == ["one"]
    assert LogEntry.objects.get().get_change_message() == "Replayed from step 'two'"


def test_a_refused_verb_is_a_message_not_an_error(admin_client: Client) -> None:
    run = JobRunFactory.create(status=RunStatus.SUCCEEDED)
    response = admin_client.post(operate_url(run, "cancel"), YES, follow=True)
    assert response.status_code == 200
    assert "only queued, sleeping, waiting or running runs can be cancelled" in (
        response.content.decode()
    )
    assert not LogEntry.objects.exists()


def test_operate_needs_post_and_a_known_verb(admin_client: Client) -> None:
    run = JobRunFactory.create(status=RunStatus.FAILED)
    assert admin_client.get(operate_url(run, "retry")).status_code == 405
    assert admin_client.post(operate_url(run, "explode")).status_code == 404
    run.refresh_from_db()
    assert run.status == RunStatus.FAILED


def test_operate_needs_a_csrf_token(admin_user: User) -> None:
    client = Client(enforce_csrf_checks=True)
    client.force_login(admin_user)
    run = JobRunFactory.create(status=RunStatus.FAILED)
    assert client.post(operate_url(run, "retry")).status_code == 403
    run.refresh_from_db()
    assert run.status == RunStatus.FAILED


# -- list actions ------------------------------------------------------------------------


def run_action(client: Client, action: str, runs: list[JobRun]) -> Any:
    return client.post(
        reverse(CHANGELIST),
        {"action": action, "_selected_action": [str(run.pk) for run in runs], "confirmed": "yes"},
        follow=True,
    )


def test_list_actions(admin_client: Client, clock: FakeClock) -> None:
    failed = JobRunFactory.create(status=RunStatus.FAILED)
    succeeded = JobRunFactory.create(status=RunStatus.SUCCEEDED)
    response = run_action(admin_client, "retry_runs", [failed, succeeded])
    page = response.content.decode()
    assert "1 run retried." in page and "only failed or cancelled runs can be retried" in page
    failed.refresh_from_db()
    assert failed.status == RunStatus.QUEUED
    queued = [JobRunFactory.create(status=RunStatus.QUEUED) for _ in range(2)]
    assert "2 runs cancelled." in run_action(admin_client, "cancel_runs", queued).content.decode()
    sleeping = JobRunFactory.create(status=RunStatus.SLEEPING, wake_at=T0 + timedelta(days=1))
    StepRecordFactory.create(
        run=sleeping, kind="sleep", status=StepStatus.SLEEPING, wake_at=sleeping.wake_at
    )
    run_action(admin_client, "wake_runs", [sleeping])
    sleeping.refresh_from_db()
    assert sleeping.wake_at == clock.now()
    assert StepRecord.objects.get(run=sleeping).wake_at == clock.now()
    assert LogEntry.objects.count() == 4


# -- who may do what ---------------------------------------------------------------------


def test_view_only_staff_sees_everything_and_can_do_nothing(viewer: Client, driver: Driver) -> None:
    run = failed_run(driver)
    listing = viewer.get(reverse(CHANGELIST))
    assert listing.status_code == 200 and str(run.pk)[:8] in listing.content.decode()
    assert "retry_runs" not in listing.content.decode()  # no actions offered
    page = viewer.get(change_url(run)).content.decode()
    assert 'class="djdj-timeline"' in page
    assert "/operate/" not in page  # no buttons
    for verb in ("retry", "cancel", "wake", "replay"):
        assert viewer.post(operate_url(run, verb), {"step": "one"}).status_code == 403
    assert run_action(viewer, "retry_runs", [run]).status_code == 200  # ignored: unknown action
    run.refresh_from_db()
    assert run.status == RunStatus.FAILED and not LogEntry.objects.exists()


def test_staff_with_the_change_permission_may_operate(
    django_user_model: type[User], driver: Driver
) -> None:
    user = django_user_model.objects.create_user("operator", password="pw", is_staff=True)
    user.user_permissions.add(Permission.objects.get(codename="change_jobrun"))
    client = Client()
    client.force_login(user)
    run = failed_run(driver)
    assert operate_url(run, "retry") in client.get(change_url(run)).content.decode()
    client.post(operate_url(run, "retry"), YES)
    run.refresh_from_db()
    assert run.status == RunStatus.QUEUED


def test_anonymous_visitors_are_sent_to_the_login_page(client: Client) -> None:
    run = JobRunFactory.create(status=RunStatus.FAILED)
    for response in (
        client.get(reverse(CHANGELIST)),
        client.get(change_url(run)),
        client.post(operate_url(run, "retry")),
    ):
        assert response.status_code == 302 and "/login/" in response["Location"]
    run.refresh_from_db()
    assert run.status == RunStatus.FAILED


def test_nobody_adds_edits_or_deletes_runs_in_the_admin(admin_client: Client) -> None:
    run = JobRunFactory.create(status=RunStatus.FAILED)
    assert admin_client.get(reverse("admin:django_durable_jobs_jobrun_add")).status_code == 403
    delete = reverse("admin:django_durable_jobs_jobrun_delete", args=[run.pk])
    assert admin_client.post(delete, {"post": "yes"}).status_code == 403
    admin_client.post(change_url(run), {"job_name": "evil", "status": "succeeded"})
    run.refresh_from_db()
    assert (run.job_name, run.status) == ("tests.noop", RunStatus.FAILED)
