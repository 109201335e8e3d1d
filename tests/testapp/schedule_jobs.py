"""Jobs started by schedules in the tests (their schedules are added as rows, like an
operator's, so that no other test's worker starts them)."""

from __future__ import annotations

import os
from typing import Any

from django_durable_jobs import Throttle, job


@job(name="tests.slot")
def slot(ctx: Any, label: str = "") -> str | None:
    """Returns the slot it was started for, so a test can check ``ctx.scheduled_at``."""
    return None if ctx.scheduled_at is None else f"{label}{ctx.scheduled_at.isoformat()}"


# tests/processes/verbs/test_schedules.py: worker processes declare a schedule in code (so
# that they all sync it at start); in-process tests never see it.
if os.environ.get("DURABLE_JOBS_TEST_CRON"):
    job(name="tests.slot_in_code", cron=os.environ["DURABLE_JOBS_TEST_CRON"])(slot.fn)


@job(name="tests.per_tenant", throttle=Throttle(10, per="1m", key=lambda tenant, **kwargs: tenant))
def per_tenant(ctx: Any, **options: Any) -> None:
    """Takes any keyword argument, but its throttle's key needs ``tenant``."""
