"""The example shop's nightly report, started by its schedule on the fake clock: a
fan-out of one invoice per paid order, then the day's total."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal

import pytest
from django.core import mail
from django.test import override_settings

from django_durable_jobs import Cron
from django_durable_jobs.engine.clock import FakeClock
from django_durable_jobs.models import JobRun, RunStatus, Schedule
from django_durable_jobs.verbs.schedules import reschedule, start_due
from example_project.shop.models import Customer, Order
from tests.conftest import Driver


@pytest.mark.django_db
@override_settings(TIME_ZONE="Europe/Paris")
def test_the_nightly_report_mails_the_sales_of_the_day_before_its_slot(
    clock: FakeClock, driver: Driver
) -> None:
    ada = Customer.objects.create(name="Ada", email="ada@example.com")
    paid_on_april_1st = []
    for total, paid_at in (
        ("10.00", datetime(2026, 4, 1, 21, 0, tzinfo=UTC)),  # 23:00 in Paris, April 1st
        ("5.50", datetime(2026, 4, 1, 22, 30, tzinfo=UTC)),  # 00:30 in Paris: April 2nd
        ("7.25", datetime(2026, 3, 31, 23, 0, tzinfo=UTC)),  # 01:00 in Paris, April 1st
    ):
        order = Order.objects.create(customer=ada, total=Decimal(total), status="paid")
        Order.objects.filter(pk=order.pk).update(created_at=paid_at)
        if total != "5.50":
            paid_on_april_1st.append(order.pk)
    clock.set(datetime(2026, 4, 1, 12, 0, tzinfo=UTC))
    # What the example's SHOP_REPORT_CRON = "0 3 * * *" declares, in TIME_ZONE (the test
    # settings declare none; tests/processes/test_example_project.py checks the example's).
    cron = Cron("0 3 * * *", timezone="Europe/Paris")
    schedule = Schedule(job_name="shop.nightly_report", cron=cron.expr, timezone="Europe/Paris")
    reschedule(schedule, clock.now()).save()
    clock.set(datetime(2026, 4, 2, 1, 0, 3, tzinfo=UTC))  # 03:00:03 in Paris, April 2nd
    (run,) = start_due(clock.now()).started
    driver.drain()
    run = JobRun.objects.get(pk=run.pk)
    assert run.status == RunStatus.SUCCEEDED
    assert run.result == {"day": "2026-04-01", "orders": 2, "total": "17.25"}
    invoices = JobRun.objects.filter(parent=run, job_name="shop.invoice")
    assert sorted(child.args[0] for child in invoices) == sorted(paid_on_april_1st)
    subjects = sorted(message.subject for message in mail.outbox)
    assert subjects == [
        *sorted(f"Invoice for order #{pk}" for pk in paid_on_april_1st),
        "Sales of 2026-04-01",
    ]
