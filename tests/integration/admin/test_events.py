"""The events admin: the event log, read-only, and the runs each event may have woken."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client
from django.urls import reverse

from django_durable_jobs.admin.events import steps_completed_by
from django_durable_jobs.engine.clock import FakeClock
from django_durable_jobs.models import Event, RunStatus
from django_durable_jobs.verbs.events import publish_event
from tests.conftest import Driver
from tests.factories import EventFactory
from tests.testapp.admin_jobs import waiter

pytestmark = pytest.mark.django_db

CHANGELIST = "admin:django_durable_jobs_event_changelist"


def woken_run(driver: Driver, clock: FakeClock, key: str, payload: Any) -> tuple[Any, Event]:
    run = waiter.enqueue(key)
    driver.step()
    clock.advance("5s")
    event = publish_event("order.paid", payload, key=key)
    clock.advance("30s")
    driver.step()
    run.refresh_from_db()
    assert run.status == RunStatus.SUCCEEDED
    return run, event


def test_an_event_lists_the_run_it_woke(driver: Driver, clock: FakeClock) -> None:
    run, event = woken_run(driver, clock, "42", {"order": 1})
    other = EventFactory.create(name="order.paid", key="7", published_at=clock.now())
    found = steps_completed_by([event, other])
    assert [(w.run_id, w.step) for w in found[event.id]] == [(run.pk, "wait-order")]
    assert found[other.id] == []


def test_a_wait_is_attributed_to_the_first_matching_event_only(
    driver: Driver, clock: FakeClock
) -> None:
    run = waiter.enqueue("42")
    driver.step()
    first = publish_event("order.paid", {"same": True}, key="42")
    second = publish_event("order.paid", {"same": True}, key="42")
    clock.advance("30s")
    driver.step()
    found = steps_completed_by([second, first])
    assert [w.run_id for w in found[first.id]] == [run.pk] and found[second.id] == []


def test_events_list_shows_payloads_and_woken_runs_in_constant_queries(
    admin_client: Client, driver: Driver, clock: FakeClock, django_assert_num_queries: Any
) -> None:
    run, _ = woken_run(driver, clock, "42", {"order": "<script>x</script>"})
    EventFactory.create_batch(30, name="user.signed_up", published_at=clock.now())
    # Session, user, count, the page, the date hierarchy (2), the name filter, the steps.
    with django_assert_num_queries(8):
        page = admin_client.get(reverse(CHANGELIST)).content.decode()
    assert reverse("admin:django_durable_jobs_jobrun_change", args=[run.pk]) in page
    assert "tests.ops.waiter · wait-order" in page
    assert "<script>x" not in page and "&lt;script&gt;x&lt;/script&gt;" in page


def test_event_page_is_read_only(admin_client: Client, driver: Driver, clock: FakeClock) -> None:
    run, event = woken_run(driver, clock, "42", {"order": 1})
    url = reverse("admin:django_durable_jobs_event_change", args=[event.pk])
    page = admin_client.get(url).content.decode()
    assert str(run.pk) in page and "&quot;order&quot;: 1" in page and 'name="_save"' not in page
    assert admin_client.get(reverse("admin:django_durable_jobs_event_add")).status_code == 403
