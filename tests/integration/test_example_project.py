"""The example project's shop, tested the way its users would test it: with
django_durable_jobs.testing (the ``durable_jobs`` fixture), plus ``manage.py demo``
run for real against a fresh SQLite file."""

from __future__ import annotations

import pytest
from django.core import mail
from django.test import override_settings

from django_durable_jobs.models import RunStatus
from django_durable_jobs.testing import InlineJobs
from example_project.shop.jobs import onboarding, receipt
from example_project.shop.models import Customer, Order


@pytest.fixture
def customer() -> Customer:
    return Customer.objects.create(name="Ada Lovelace", email="ada@example.com")


@pytest.mark.django_db
def test_a_paid_order_resumes_onboarding_and_sends_the_receipt(
    durable_jobs: InlineJobs, customer: Customer
) -> None:
    run = durable_jobs.enqueue(onboarding, customer.pk)
    durable_jobs.drain()  # load the customer, welcome email, then look around for 3 days
    assert durable_jobs.refresh(run).status == RunStatus.SLEEPING
    assert [message.subject for message in mail.outbox] == ["Welcome to the shop"]
    durable_jobs.advance("3d")  # now it waits (up to 7 days) for order.paid
    assert durable_jobs.refresh(run).status == RunStatus.WAITING

    order = Order.objects.create(customer=customer, total="42.00")  # pending: no event
    durable_jobs.drain()
    assert durable_jobs.refresh(run).status == RunStatus.WAITING
    order.status = Order.Status.PAID
    order.save()  # publish_on(post_save) publishes order.paid, key = the customer's id
    durable_jobs.drain()  # the run resumes, invokes shop.receipt, and finishes

    result = durable_jobs.result(run)
    assert result["ordered"] is True and result["order_id"] == order.pk
    assert result["receipt"]["sent"] == f"Receipt for order #{order.pk} -> ada@example.com"
    assert [message.subject for message in mail.outbox] == [
        "Welcome to the shop",
        f"Receipt for order #{order.pk}",
    ]
    assert [step.name for step in durable_jobs.steps(run)] == [
        "load-customer",
        "send-welcome",
        "look-around",
        "wait-order",
        "receipt",
    ]
    (child,) = durable_jobs.runs(receipt)
    assert child.parent_id == run.pk and child.status == RunStatus.SUCCEEDED


@pytest.mark.django_db
def test_without_an_order_within_a_week_the_customer_is_nudged(
    durable_jobs: InlineJobs, customer: Customer
) -> None:
    start = durable_jobs.now
    run = durable_jobs.run(onboarding, customer.pk)  # ten days, in milliseconds
    assert durable_jobs.result(run) == {"ordered": False}
    assert (durable_jobs.now - start).days == 10
    assert [message.subject for message in mail.outbox] == ["Welcome to the shop", "Still looking?"]


@pytest.mark.django_db
def test_another_customers_order_does_not_wake_the_run(
    durable_jobs: InlineJobs, customer: Customer
) -> None:
    other = Customer.objects.create(name="Grace Hopper", email="grace@example.com")
    run = durable_jobs.enqueue(onboarding, customer.pk)
    durable_jobs.advance("3d", drain=False)
    durable_jobs.drain()
    durable_jobs.advance("3d")
    Order.objects.create(customer=other, total="9.99", status=Order.Status.PAID)
    durable_jobs.drain()
    assert durable_jobs.refresh(run).status == RunStatus.WAITING
    assert [event.key for event in durable_jobs.events("order.paid")] == [str(other.pk)]


@pytest.mark.django_db
@override_settings(SHOP_FLAKY_MAIL=True)
def test_a_failed_receipt_is_retried_and_its_completed_step_replayed(
    durable_jobs: InlineJobs, customer: Customer
) -> None:
    order = Order.objects.create(customer=customer, total="5.00", status=Order.Status.PAID)
    run = durable_jobs.run(receipt, order.pk)  # attempt 1 fails, the backoff is skipped
    assert run.status == RunStatus.SUCCEEDED and run.attempt == 2
    load, send = durable_jobs.steps(run)
    assert (load.name, load.attempts) == ("load-order", 1)  # replayed on attempt 2
    assert (send.name, send.attempts) == ("send-receipt", 2)
    assert "mail server unavailable" not in send.error  # the last attempt succeeded
