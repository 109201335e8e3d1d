"""The run page's timeline alone (``<run>/timeline/``): what a live run's page fetches
to refresh itself (refresh.js), with the page's permission and none of the page around
it. The browser side (the page fetches it, not itself; paused while hidden) is in
tests/browser/test_observe_browser.py."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Permission, User
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from django_durable_jobs.models import JobRun, RunStatus, StepStatus
from tests.factories import JobRunFactory, StepRecordFactory

pytestmark = pytest.mark.django_db


def fragment_url(run: JobRun) -> str:
    return reverse("admin:django_durable_jobs_jobrun_timeline", args=[run.pk])


def page_url(run: JobRun) -> str:
    return reverse("admin:django_durable_jobs_jobrun_change", args=[run.pk])


def live_run() -> JobRun:
    run = JobRunFactory.create(status=RunStatus.WAITING)
    StepRecordFactory.create(run=run, name="load", output={"rows": 3})
    StepRecordFactory.create(
        run=run,
        name="wait-paid",
        kind="wait",
        status=StepStatus.WAITING,
        completed_at=None,
        output=None,
        event="order.paid",
    )
    return run


def staff(django_user_model: type[User], name: str, *codenames: str) -> Client:
    user = django_user_model.objects.create_user(name, password="pw", is_staff=True)
    user.user_permissions.set(Permission.objects.filter(codename__in=codenames))
    client = Client()
    client.force_login(user)
    return client


def test_the_fragment_is_the_timeline_and_nothing_around_it(admin_client: Client) -> None:
    run = live_run()
    response = admin_client.get(fragment_url(run))
    assert response.status_code == 200
    html = response.content.decode()
    assert html.lstrip().startswith('<section class="djdj-timeline" id="timeline"')
    assert html.rstrip().endswith("</section>")
    assert 'data-step="load"' in html and 'data-step="wait-paid"' in html
    assert "order.paid" in html
    assert "djdj-fields" not in html and "<html" not in html  # no details, no page
    assert 'name="csrfmiddlewaretoken"' in html  # its replay buttons still post
    # Still live: it asks to be fetched again, from itself.
    assert f'data-djdj-refresh="5" data-djdj-refresh-url="{fragment_url(run)}"' in html


def test_the_run_page_refreshes_from_the_fragment(admin_client: Client) -> None:
    run = live_run()
    html = admin_client.get(page_url(run)).content.decode()
    assert f'data-djdj-refresh-url="{fragment_url(run)}"' in html


def test_a_finished_run_stops_the_refresh(admin_client: Client) -> None:
    run = live_run()
    JobRun.objects.filter(pk=run.pk).update(status=RunStatus.SUCCEEDED)
    html = admin_client.get(fragment_url(run)).content.decode()
    assert 'id="timeline"' in html and "data-djdj-refresh" not in html


def test_the_fragment_costs_fewer_queries_than_the_page(admin_client: Client) -> None:
    run = live_run()
    admin_client.get(page_url(run))  # the clock's offset, the session: measured once
    with CaptureQueriesContext(connection) as page:
        admin_client.get(page_url(run))
    with CaptureQueriesContext(connection) as fragment:
        admin_client.get(fragment_url(run))
    assert len(fragment) < len(page), (len(fragment), len(page))


def test_the_fragment_has_the_pages_permission(
    client: Client, django_user_model: type[User]
) -> None:
    run = live_run()
    anonymous = client.get(fragment_url(run))
    assert anonymous.status_code == 302 and "/login/" in anonymous["Location"]
    nobody = staff(django_user_model, "nobody")  # staff, but may not see runs
    assert nobody.get(page_url(run)).status_code == 403
    assert nobody.get(fragment_url(run)).status_code == 403
    viewer = staff(django_user_model, "viewer", "view_jobrun")
    response = viewer.get(fragment_url(run))
    assert response.status_code == 200
    assert "Replay from this step" not in response.content.decode()  # view only
    assert viewer.post(fragment_url(run)).status_code == 405


#: A run id no run has (fixed: pytest-xdist's processes must collect the same test ids).
NO_SUCH_RUN = "0badc0de-0000-4000-8000-000000000000"


@pytest.mark.parametrize("run_id", [NO_SUCH_RUN, "not-a-run"], ids=["no-such-run", "not-a-run"])
def test_an_unknown_run_is_404(admin_client: Client, run_id: str) -> None:
    url = reverse("admin:django_durable_jobs_jobrun_timeline", args=[run_id])
    assert admin_client.get(url).status_code == 404
