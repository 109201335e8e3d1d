"""The shop's durable flows: onboarding a customer, and sending an order's receipt.

``onboarding`` welcomes a new customer, lets them look around for a while
(``DEMO_SLEEP``, "2s" in the demo; days in real life), then waits up to a week
for their first paid order. A paid order is published as ``order.paid`` by
``publish_on`` (see ``apps.py``); the run resumes and invokes ``shop.receipt`` as
a child run. Without an order within the week, it sends a nudge instead.

``nightly_report`` runs on a schedule (``SHOP_REPORT_CRON``): it fans out one
``shop.invoice`` child run per paid order of the day before, then mails the total.
"""

from __future__ import annotations

import logging
from datetime import date, datetime, time, timedelta
from decimal import Decimal
from typing import Any

from django.conf import settings
from django.core.mail import send_mail
from django.utils import timezone

from django_durable_jobs import job

from .models import Customer, Order

log = logging.getLogger(__name__)


# -- steps: plain functions, each run once per run (their results are stored) ----------


def load_customer(customer_id: int) -> dict[str, Any]:
    customer = Customer.objects.get(pk=customer_id)
    return {"id": customer.pk, "name": customer.name, "email": customer.email}


def send_welcome(customer: dict[str, Any]) -> str:
    return _mail(customer["email"], "Welcome to the shop", f"Hello {customer['name']}!")


def send_nudge(customer: dict[str, Any]) -> str:
    return _mail(customer["email"], "Still looking?", "Here is 10% off your first order.")


def load_order(order_id: int) -> dict[str, Any]:
    order = Order.objects.select_related("customer").get(pk=order_id)
    return {"id": order.pk, "total": str(order.total), "email": order.customer.email}


def send_receipt(order: dict[str, Any], attempt: int) -> str:
    if getattr(settings, "SHOP_FLAKY_MAIL", False) and attempt == 1:
        # DEMO_FLAKY=1: the mail server is down for the first attempt. The run is
        # retried after a backoff; "load-order" is replayed, not run again.
        raise ConnectionError("mail server unavailable (DEMO_FLAKY: first attempt fails)")
    return _mail(order["email"], f"Receipt for order #{order['id']}", f"Paid: {order['total']}")


def _mail(to: str, subject: str, body: str) -> str:
    send_mail(subject, body, None, [to])
    log.info("mail sent to %s: %s", to, subject)
    return f"{subject} -> {to}"


# -- jobs ------------------------------------------------------------------------------


@job(name="shop.receipt", retries=5, backoff="1s")
def receipt(ctx: Any, order_id: int) -> dict[str, Any]:
    order = ctx.step.run("load-order", load_order, order_id)
    sent = ctx.step.run("send-receipt", send_receipt, order, ctx.attempt)
    return {"order_id": order["id"], "sent": sent}


@job(name="shop.onboarding", retries=3, backoff="1s", timeout="10m")
def onboarding(ctx: Any, customer_id: int) -> dict[str, Any]:
    customer = ctx.step.run("load-customer", load_customer, customer_id)
    ctx.step.run("send-welcome", send_welcome, customer)
    ctx.step.sleep("look-around", getattr(settings, "SHOP_LOOK_AROUND", "3d"))
    order = ctx.step.wait_for_event(
        "wait-order", "order.paid", match=str(customer_id), timeout="7d"
    )
    if order is None:
        ctx.step.run("nudge", send_nudge, customer)
        return {"ordered": False}
    sent = ctx.step.invoke("receipt", receipt, order["order_id"], timeout="1h")
    return {"ordered": True, "order_id": order["order_id"], "receipt": sent}


# -- the nightly report: a schedule and a fan-out over the day's orders ----------------


def paid_orders_of(day: str) -> list[int]:
    """The ids of the paid orders created on ``day`` (an ISO date in TIME_ZONE)."""
    # A range of instants, not created_at__date: that needs MySQL's time zone tables.
    midnight = datetime.combine(date.fromisoformat(day), time.min)
    start, end = timezone.make_aware(midnight), timezone.make_aware(midnight + timedelta(days=1))
    paid = Order.objects.filter(status=Order.Status.PAID, created_at__gte=start, created_at__lt=end)
    return list(paid.order_by("pk").values_list("pk", flat=True))


def send_invoice(order: dict[str, Any]) -> str:
    return _mail(order["email"], f"Invoice for order #{order['id']}", f"Total: {order['total']}")


def send_report(report: dict[str, Any]) -> str:
    body = f"{report['orders']} paid order(s), {report['total']} in all."
    to = getattr(settings, "SHOP_REPORT_TO", "owner@example.com")
    return _mail(to, f"Sales of {report['day']}", body)


@job(name="shop.invoice", retries=5, backoff="1s")
def invoice(ctx: Any, order_id: int) -> dict[str, Any]:
    """One order's invoice: a child run of the nightly report's fan-out."""
    order = ctx.step.run("load-order", load_order, order_id)
    ctx.step.run("send-invoice", send_invoice, order)
    return {"order_id": order["id"], "total": order["total"]}


# SHOP_REPORT_CRON: "0 3 * * *" (03:00 in TIME_ZONE) in the example project; the test
# settings leave it out so that no worker of the test suite starts it at 03:00.
@job(name="shop.nightly_report", cron=getattr(settings, "SHOP_REPORT_CRON", None))
def nightly_report(ctx: Any) -> dict[str, Any]:
    """Invoices each of yesterday's paid orders (one child run per order, all started
    at once) and mails the day's total. ``ctx.scheduled_at`` is the slot, so a run that
    starts late (or is retried the next morning) still reports the right day."""
    slot = ctx.scheduled_at or timezone.now()
    day = (timezone.localtime(slot) - timedelta(days=1)).date().isoformat()
    order_ids = ctx.step.run("paid-orders", paid_orders_of, day)
    invoices = ctx.step.map("invoices", invoice, order_ids, timeout="6h")
    total = sum((Decimal(sent["total"]) for sent in invoices), Decimal(0))
    report = {"day": day, "orders": len(invoices), "total": str(total)}
    ctx.step.run("mail", send_report, report)
    return report
