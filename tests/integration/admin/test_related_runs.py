"""The runs about an object on its own admin page: the example shop's customers and
orders (``RelatedRunsMixin``), through the real admin client."""

from __future__ import annotations

from decimal import Decimal

import pytest
from django.contrib import admin
from django.db.models import Q
from django.test import Client
from django.urls import reverse

from django_durable_jobs.admin import RunsAbout
from django_durable_jobs.models import JobRun
from example_project.shop.jobs import onboarding, receipt
from example_project.shop.models import Customer, Order

pytestmark = pytest.mark.django_db


def run_link(run: JobRun) -> str:
    url = reverse("admin:django_durable_jobs_jobrun_change", args=[run.pk])
    return f'<a href="{url}">{run.job_name} {str(run.pk)[:8]}</a>'


def customer_page(client: Client, customer: Customer) -> str:
    url = reverse("admin:shop_customer_change", args=[customer.pk])
    response = client.get(url)
    assert response.status_code == 200
    return response.content.decode()


def test_customer_page_lists_its_runs_only(admin_client: Client) -> None:
    ada = Customer.objects.create(name="Ada", email="ada@example.com")
    bob = Customer.objects.create(name="Bob", email="bob@example.com")
    by_position = onboarding.enqueue(ada.pk)
    by_name = onboarding.enqueue(customer_id=ada.pk)
    other = onboarding.enqueue(bob.pk)
    html = customer_page(admin_client, ada)
    assert run_link(by_position) in html and run_link(by_name) in html
    assert run_link(other) not in html
    assert "djdj-badge--queued" in html and "timeline.css" in html
    assert run_link(other) in customer_page(admin_client, bob)


def test_order_page_lists_its_receipts(admin_client: Client) -> None:
    ada = Customer.objects.create(name="Ada", email="ada@example.com")
    order = Order.objects.create(customer=ada, total=Decimal("9.99"))
    mine = receipt.enqueue(order.pk)
    receipt.enqueue(order.pk + 1000)
    html = admin_client.get(reverse("admin:shop_order_change", args=[order.pk])).content.decode()
    assert run_link(mine) in html
    assert html.count("shop.receipt ") == 1


def test_no_runs_yet(admin_client: Client) -> None:
    ada = Customer.objects.create(name="Ada", email="ada@example.com")
    assert "No runs." in customer_page(admin_client, ada)


def test_key_prefix_and_bad_rules() -> None:
    rule = RunsAbout("shop.receipt", key_prefix="order-{pk}-")
    assert rule.matching(42) == Q(job_name="shop.receipt", idempotency_key__startswith="order-42-")
    with pytest.raises(ValueError, match="one of them"):
        RunsAbout("shop.receipt")
    with pytest.raises(ValueError, match="one of them"):
        RunsAbout("shop.receipt", argument="order_id", key_prefix="order-{pk}")


def test_key_prefix_lists_runs_on_the_order_page(
    admin_client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``RunsAbout(key_prefix=...)`` through the real page: the example's ``OrderAdmin``
    given a key rule in place of its argument rule."""
    order_admin = admin.site._registry[Order]
    rules = (RunsAbout("shop.receipt", key_prefix="order-{pk}-"),)
    monkeypatch.setattr(order_admin, "related_runs", rules)
    ada = Customer.objects.create(name="Ada", email="ada@example.com")
    order = Order.objects.create(customer=ada, total=Decimal("1"))
    keyed = receipt.using(idempotency_key=f"order-{order.pk}-receipt").enqueue(order.pk + 7)
    longer = receipt.using(idempotency_key=f"order-{order.pk}0-receipt").enqueue(order.pk)
    other_job = onboarding.using(idempotency_key=f"order-{order.pk}-welcome").enqueue(ada.pk)
    html = admin_client.get(reverse("admin:shop_order_change", args=[order.pk])).content.decode()
    assert run_link(keyed) in html
    assert run_link(longer) not in html  # order 70's key is not order 7's
    assert run_link(other_job) not in html  # the rule names its job
    assert html.count("shop.receipt ") == 1


def test_key_prefix_finds_runs(admin_client: Client) -> None:
    ada = Customer.objects.create(name="Ada", email="ada@example.com")
    order = Order.objects.create(customer=ada, total=Decimal("1"))
    keyed = receipt.using(idempotency_key=f"order-{order.pk}-receipt").enqueue(order.pk + 7)
    about = RunsAbout("shop.receipt", key_prefix="order-{pk}-").matching(order.pk)
    assert list(JobRun.objects.filter(about)) == [keyed]
