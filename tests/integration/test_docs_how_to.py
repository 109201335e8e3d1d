"""The how-to pages about results, messages and progress run as they are written: their
jobs, views and tests, against the test database with ``InlineJobs`` (no worker)."""

from __future__ import annotations

import types
import uuid
from collections.abc import Iterator

import pytest
from asgiref.sync import async_to_sync
from django.test import Client, RequestFactory, override_settings

from django_durable_jobs import RetryAfter
from django_durable_jobs.definitions import registry
from django_durable_jobs.testing import InlineJobs
from tests.docs_how_to import load

pytestmark = pytest.mark.django_db


@pytest.fixture
def jobs() -> Iterator[InlineJobs]:
    before = set(registry.all_jobs())
    with InlineJobs() as inline:
        yield inline
    for name in set(registry.all_jobs()) - before:
        registry.unregister(name)


def _page(name: str) -> types.ModuleType:
    return load(f"docs/how-to/{name}.md")


def test_results_the_view_answers_a_short_report_at_once(jobs: InlineJobs) -> None:
    page = _page("results")
    with override_settings(ROOT_URLCONF=page.__name__):
        page.test_a_short_report_is_answered_at_once(Client(), jobs)


def test_results_an_unfinished_report_redirects_to_its_status_page(jobs: InlineJobs) -> None:
    page = _page("results")

    def slow(year: int) -> int:
        raise RetryAfter("1m")  # the run is not finished when the view stops waiting

    page.add_up = slow  # type: ignore[attr-defined]
    with override_settings(ROOT_URLCONF=page.__name__):
        client = Client()
        response = client.get("/reports/2024/")
        assert response.status_code == 302
        assert response["Location"].startswith("/reports/status/")
        assert client.get(response["Location"]).status_code == 202
        page.add_up = lambda year: 7  # type: ignore[attr-defined]
        jobs.advance("1m")
        assert client.get(response["Location"]).json() == {"year": 2024, "total": 7}


def test_results_the_committed_and_the_async_views_wait_too(jobs: InlineJobs) -> None:
    page = _page("results")
    request = RequestFactory().get("/")
    with override_settings(ROOT_URLCONF=page.__name__):
        answer = page.sales_report_committed(request, 2002)
        assert answer.status_code == 200 and b'"total": 1' in answer.content
        answer = async_to_sync(page.sales_report_async)(request, 2003)
        assert answer.status_code == 200 and b'"total": 3' in answer.content


def test_messages_the_approval_flow_and_its_tests_run(jobs: InlineJobs) -> None:
    page = _page("messages")
    page.test_an_approved_refund_is_paid_back(jobs)
    page.test_a_refund_nobody_answers_is_not_paid(jobs)
    assert page.SENT[0].startswith("/refunds/")


def test_messages_the_approver_s_view_sends_once_and_refuses_closed_runs(
    jobs: InlineJobs,
) -> None:
    page = _page("messages")
    run = jobs.enqueue(page.refund, 9)
    jobs.drain()
    factory = RequestFactory()
    decline = factory.post("/", {"approved": "no", "note": "not this time"})
    assert page.approve(decline, str(run.id)).status_code == 200
    jobs.drain()
    assert jobs.result(run) == {"order_id": 9, "refunded": False, "why": "not this time"}
    assert page.approve(decline, str(run.id)).status_code == 409
    assert page.approve(decline, str(uuid.uuid4())).status_code == 404


def test_progress_the_job_view_and_test_run(jobs: InlineJobs) -> None:
    page = _page("progress")
    page.test_the_last_progress_is_stored_with_the_result(jobs)
    run = jobs.runs("imports.import_rows")[-1]
    answer = page.import_progress(RequestFactory().get("/"), run.id)
    assert answer.status_code == 200 and b'"done": 250' in answer.content
