"""Starting things from the admin through the real client: enqueue a run, run a
schedule now, publish an event. Each needs its model permission, and a refusal shows
the API's own message on the form again, with nothing written."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from django.contrib.admin.models import LogEntry
from django.contrib.auth.models import Permission, User
from django.test import Client
from django.urls import reverse
from django.utils.html import escape

from django_durable_jobs.engine.clock import FakeClock
from django_durable_jobs.models import Event, JobRun, RunStatus, Schedule
from tests.conftest import Driver
from tests.testapp.admin_jobs import waiter

pytestmark = pytest.mark.django_db

ENQUEUE = "admin:django_durable_jobs_jobrun_enqueue"
PUBLISH = "admin:django_durable_jobs_event_publish"
T0 = datetime(2026, 3, 2, 12, 0, tzinfo=UTC)


def staff(django_user_model: type[User], *codenames: str) -> Client:
    user = django_user_model.objects.create_user("staff", password="pw", is_staff=True)
    user.user_permissions.set(Permission.objects.filter(codename__in=codenames))
    client = Client()
    client.force_login(user)
    return client


def enqueue_form(**changes: str) -> dict[str, str]:
    data = {"job": "tests.add", "args": "[2, 3]", "kwargs": "{}", "queue": "", "priority": ""}
    data.update(changes)
    return data


def run_now_url(schedule: Schedule) -> str:
    return reverse("admin:django_durable_jobs_schedule_run_now", args=[schedule.pk])


# -- permissions -----------------------------------------------------------------------


def test_starting_anything_needs_the_models_permission(django_user_model: type[User]) -> None:
    # Seeing runs, events and schedules is not starting them.
    client = staff(django_user_model, "view_jobrun", "view_event", "view_schedule")
    schedule = Schedule.objects.create(job_name="tests.noop", cron="0 9 * * *", timezone="UTC")
    assert client.get(reverse(ENQUEUE)).status_code == 403
    assert client.post(reverse(ENQUEUE), enqueue_form()).status_code == 403
    assert client.post(reverse(PUBLISH), {"name": "order.paid"}).status_code == 403
    assert client.post(run_now_url(schedule)).status_code == 403
    assert not JobRun.objects.exists() and not Event.objects.exists()
    # And the pages that link to them do not offer them.
    runs = client.get(reverse("admin:django_durable_jobs_jobrun_changelist")).content.decode()
    assert reverse(ENQUEUE) not in runs
    events = client.get(reverse("admin:django_durable_jobs_event_changelist")).content.decode()
    assert reverse(PUBLISH) not in events
    page = client.get(reverse("admin:django_durable_jobs_schedule_change", args=[schedule.pk]))
    assert run_now_url(schedule) not in page.content.decode()
    dashboard = client.get(reverse("admin:django_durable_jobs_dashboard_changelist"))
    assert reverse(ENQUEUE) not in dashboard.content.decode()


def test_add_jobrun_alone_lets_a_user_enqueue(
    django_user_model: type[User], driver: Driver
) -> None:
    client = staff(django_user_model, "view_jobrun", "add_jobrun")
    changelist = reverse("admin:django_durable_jobs_jobrun_changelist")
    assert reverse(ENQUEUE) in client.get(changelist).content.decode()  # the button
    page = client.get(reverse(ENQUEUE), {"job": "tests.add"})
    assert page.status_code == 200
    assert '<option value="tests.add" selected>' in page.content.decode()
    response = client.post(reverse(ENQUEUE), enqueue_form())
    run = JobRun.objects.get()
    assert response.status_code == 302
    assert response["Location"] == reverse("admin:django_durable_jobs_jobrun_change", args=[run.pk])
    assert client.post(reverse(PUBLISH), {"name": "order.paid"}).status_code == 403
    # The dashboard offers it too, and beside each job of its durations, that job.
    driver.drain()
    dashboard = client.get(reverse("admin:django_durable_jobs_dashboard_changelist"))
    assert f"{reverse(ENQUEUE)}?job=tests.add" in dashboard.content.decode()


# -- enqueue ---------------------------------------------------------------------------


def test_enqueueing_creates_the_run_with_its_arguments_and_options(
    admin_client: Client, clock: FakeClock
) -> None:
    clock.set(T0)
    data = enqueue_form(
        job="tests.onboarding",
        args="[]",
        kwargs='{"user_id": 42}',
        queue="emails",
        priority="5",
        run_after="5m",
        idempotency_key="welcome-42",
    )
    response = admin_client.post(reverse(ENQUEUE), data, follow=True)
    run = JobRun.objects.get()
    assert (run.job_name, run.args, run.kwargs) == ("tests.onboarding", [], {"user_id": 42})
    assert (run.queue, run.priority, run.idempotency_key) == ("emails", 5, "welcome-42")
    assert run.status == RunStatus.QUEUED and run.wake_at == datetime(2026, 3, 2, 12, 5, tzinfo=UTC)
    assert f"Enqueued run {run.pk} of tests.onboarding." in response.content.decode()
    assert LogEntry.objects.get().get_change_message() == "Enqueued in the admin"
    # The same key again: the key's run, as enqueue() returns it, and no second run.
    again = admin_client.post(reverse(ENQUEUE), data, follow=True)
    assert JobRun.objects.count() == 1
    assert f"No new run: run {run.pk} of tests.onboarding" in again.content.decode()


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        # Not JSON at all: said before the API is asked.
        ({"args": "[1, 2"}, "args is not valid JSON: Expecting"),
        ({"kwargs": '{"a": 1, "a": 2}'}, "kwargs is not valid JSON: the key &#x27;a&#x27; appears"),
        ({"args": '{"a": 1}'}, "a JSON list of positional arguments"),
        # JSON the API refuses, with its message and code.
        (
            {"args": "[NaN, 1]"},
            "X_PAYLOAD_INVALID: job &#x27;tests.add&#x27;: argument 0 cannot be stored as JSON",
        ),
        ({"args": "[1]"}, "X_PAYLOAD_INVALID: job &#x27;tests.add&#x27;: missing a required"),
        # A flow-control key the job's key function cannot make (enqueue refuses it).
        ({"job": "tests.by_region", "args": '[{"name": "x"}]'}, "KeyError: &#x27;region&#x27;"),
        # Options, as using() refuses them.
        ({"run_after": "soon"}, "X_DURATION_INVALID"),
        ({"idempotency_key": "k" * 256}, "idempotency_key must be a non-empty string of"),
        # A job not registered (here: removed by a deploy since the page was drawn).
        ({"job": "tests.ad"}, "X_JOB_UNKNOWN: no job is registered as &#x27;tests.ad&#x27;"),
    ],
)
def test_a_refused_enqueue_shows_the_form_again_with_the_apis_message(
    admin_client: Client, changes: dict[str, str], message: str
) -> None:
    response = admin_client.post(reverse(ENQUEUE), enqueue_form(**changes))
    assert response.status_code == 200
    text = response.content.decode()
    assert message in text
    assert 'class="errornote"' in text
    assert escape(changes.get("args", "[2, 3]")) in text  # what was typed is kept
    assert not JobRun.objects.exists()


# -- run a schedule now ----------------------------------------------------------------


def test_run_now_starts_one_run_with_the_schedules_arguments_and_keeps_its_next_slot(
    admin_client: Client, clock: FakeClock
) -> None:
    clock.set(T0)
    schedule = Schedule.objects.create(
        job_name="tests.add",
        cron="0 9 * * *",
        timezone="UTC",
        args=[2],
        kwargs={"b": 3},
        next_run_at=datetime(2026, 3, 3, 9, 0, tzinfo=UTC),
    )
    change = reverse("admin:django_durable_jobs_schedule_change", args=[schedule.pk])
    assert run_now_url(schedule) in admin_client.get(change).content.decode()  # the button
    response = admin_client.post(run_now_url(schedule), follow=True)
    run = JobRun.objects.get()
    assert (run.job_name, run.args, run.kwargs) == ("tests.add", [2], {"b": 3})
    assert (run.schedule_id, run.scheduled_at, run.wake_at) == (schedule.pk, T0, T0)
    assert response.redirect_chain[-1][0] == reverse(
        "admin:django_durable_jobs_jobrun_change", args=[run.pk]
    )
    assert "the schedule&#x27;s next run is unchanged" in response.content.decode()
    schedule.refresh_from_db()
    assert schedule.next_run_at == datetime(2026, 3, 3, 9, 0, tzinfo=UTC)
    assert schedule.last_run_at is None and schedule.enabled
    assert admin_client.get(run_now_url(schedule)).status_code == 405  # POST only


def test_run_now_of_arguments_the_job_refuses_says_why_and_starts_nothing(
    admin_client: Client,
) -> None:
    schedule = Schedule.objects.create(
        job_name="tests.add", cron="0 9 * * *", timezone="UTC", args=[1]
    )
    response = admin_client.post(run_now_url(schedule), follow=True)
    assert "No run started: X_PAYLOAD_INVALID: job &#x27;tests.add&#x27;" in (
        response.content.decode()
    )
    assert not JobRun.objects.exists()
    assert Schedule.objects.get().enabled  # a tick would disable it; an operator's click not


# -- publish ---------------------------------------------------------------------------


def test_publishing_wakes_the_run_waiting_for_the_event(
    admin_client: Client, driver: Driver, clock: FakeClock
) -> None:
    run = waiter.enqueue("42")
    driver.step()
    assert JobRun.objects.get().status == RunStatus.WAITING
    form = {"name": "order.paid", "key": "42", "payload": '{"paid": true}'}
    response = admin_client.post(reverse(PUBLISH), form, follow=True)
    event = Event.objects.get()
    assert (event.name, event.key, event.payload) == ("order.paid", "42", {"paid": True})
    text = response.content.decode()
    assert f"Published order.paid with key &#x27;42&#x27; as event #{event.pk}: 1 waiting" in text
    assert response.redirect_chain[-1][0] == reverse(
        "admin:django_durable_jobs_event_change", args=[event.pk]
    )
    driver.step()  # runnable now, not in seven days
    run.refresh_from_db()
    assert run.status == RunStatus.SUCCEEDED
    assert run.result == {"paid": True}


@pytest.mark.parametrize(
    ("form", "message"),
    [
        ({"name": "order.paid", "payload": "{"}, "payload is not valid JSON"),
        ({"name": "order.paid", "payload": "[NaN]"}, "X_PAYLOAD_INVALID: event"),
        ({"name": "x" * 201}, "event names are non-empty strings of &lt;= 200 chars"),
        ({"name": "order.paid", "key": "k" * 256}, "key is 256 characters, over the 255"),
    ],
)
def test_a_refused_publish_shows_the_form_again_with_the_apis_message(
    admin_client: Client, form: dict[str, str], message: str
) -> None:
    response = admin_client.post(reverse(PUBLISH), form)
    assert response.status_code == 200
    assert message in response.content.decode()
    assert not Event.objects.exists()
