"""The Pauses page: pausing (add) and resuming (the Resume action) need the model's
permissions; a job must be registered; the dashboard shows what is paused."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Permission, User
from django.test import Client
from django.urls import reverse

from django_durable_jobs.engine.clock import FakeClock
from django_durable_jobs.models import Pause
from django_durable_jobs.verbs import pauses

pytestmark = pytest.mark.django_db

ADD = "admin:django_durable_jobs_pause_add"
LIST = "admin:django_durable_jobs_pause_changelist"


def staff(django_user_model: type[User], *codenames: str) -> Client:
    user = django_user_model.objects.create_user("ops", password="pw", is_staff=True)
    user.user_permissions.set(Permission.objects.filter(codename__in=codenames))
    client = Client()
    client.force_login(user)
    return client


def test_an_operator_pauses_a_queue_and_resumes_it(
    django_user_model: type[User], clock: FakeClock
) -> None:
    client = staff(django_user_model, "view_pause", "add_pause", "delete_pause", "view_jobrun")
    response = client.post(
        reverse(ADD), {"kind": "queue", "name": "mail", "reason": "SMTP down"}, follow=True
    )
    assert response.status_code == 200
    pause = Pause.objects.get()
    assert (pause.kind, pause.name, pause.reason, pause.paused_by) == (
        "queue",
        "mail",
        "SMTP down",
        "ops",
    )
    assert "Workers stop claiming the runs of queue mail" in response.content.decode()
    dashboard = client.get(reverse("admin:django_durable_jobs_dashboard_changelist"))
    assert "queue mail</a>: SMTP down (by ops)" in dashboard.content.decode()
    response = client.post(
        reverse(LIST), {"action": "resume", "_selected_action": [pause.pk]}, follow=True
    )
    assert "Resumed queue mail" in response.content.decode()
    assert not Pause.objects.exists()


def test_pausing_an_unknown_job_is_refused_on_the_field(admin_client: Client) -> None:
    response = admin_client.post(reverse(ADD), {"kind": "job", "name": "tests.nope"})
    assert response.status_code == 200
    assert "no job is registered as" in response.content.decode()
    assert not Pause.objects.exists()


def test_without_the_permissions_nothing_is_paused_or_resumed(
    django_user_model: type[User],
) -> None:
    client = staff(django_user_model, "view_pause")
    assert client.post(reverse(ADD), {"kind": "queue", "name": "mail"}).status_code == 403
    assert not Pause.objects.exists()
    pauses.pause("queue", "mail")
    page = client.get(reverse(LIST)).content.decode()
    assert "mail" in page and 'value="resume"' not in page
    client.post(reverse(LIST), {"action": "resume", "_selected_action": [Pause.objects.get().pk]})
    assert Pause.objects.exists()
