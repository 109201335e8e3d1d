"""``DURABLE_JOBS["READ_DATABASE"]`` against a real streaming replica (tests/replica.py):
the operators' lists, the dashboard, metrics' figures and ``jobs stats`` read the
replica; a run page, the verbs and the actions read and write the primary.

Replay on the replica is paused to tell the two apart: what the primary has and the
replica has not yet replayed shows on the pages that read the primary only. One test,
so that one replica starts per test process (its base backup costs seconds).
"""

from __future__ import annotations

from io import StringIO
from typing import Any

import pytest
from django.core.management import call_command
from django.test import Client
from django.urls import reverse

from django_durable_jobs.models import JobRun, RunStatus
from django_durable_jobs.observe import stats
from tests.replica import caught_up, replay, replica  # noqa: F401 - `replica` is a fixture
from tests.testapp import jobs

pytestmark = [
    pytest.mark.postgres(reason="a streaming replica of a PostgreSQL server"),
    pytest.mark.django_db(transaction=True, databases=["default", "replica"]),
]

DASHBOARD = reverse("admin:django_durable_jobs_dashboard_changelist")
RUNS = reverse("admin:django_durable_jobs_jobrun_changelist")


def on_dashboard(client: Client) -> tuple[int, int]:
    """The dashboard's counts of queued and cancelled runs."""
    counts = client.get(DASHBOARD).context["stats"].runs_by_status
    return counts[RunStatus.QUEUED], counts[RunStatus.CANCELLED]


def test_lists_dashboard_and_stats_read_the_replica_and_run_pages_the_primary(
    admin_client: Client,
    replica: str,  # noqa: F811 - the fixture
    settings: Any,
) -> None:
    settings.DURABLE_JOBS = {**settings.DURABLE_JOBS, "READ_DATABASE": replica}
    run = jobs.noop.enqueue()
    caught_up(replica)
    assert on_dashboard(admin_client) == (1, 0)
    replay(replica, paused=True)
    try:
        later = jobs.noop.enqueue()  # on the primary only, while replay is paused
        admin_client.post(
            reverse(
                "admin:django_durable_jobs_jobrun_operate",
                kwargs={"object_id": run.pk, "verb": "cancel"},
            ),
            {"confirmed": "yes"},
        )
        assert JobRun.objects.get(pk=run.pk).status == RunStatus.CANCELLED  # the primary

        assert on_dashboard(admin_client) == (1, 0)  # the replica's figures: lagging
        listed = admin_client.get(RUNS).context["cl"].result_list
        assert [(r.pk, r.status) for r in listed] == [(run.pk, RunStatus.QUEUED)]
        out = StringIO()
        call_command("jobs", "stats", stdout=out)
        assert "queued 1 " in out.getvalue() and "cancelled 0 " in out.getvalue()
        assert stats.runs_by_status()[RunStatus.CANCELLED] == 0  # what metrics export

        page = admin_client.get(reverse("admin:django_durable_jobs_jobrun_change", args=[run.pk]))
        assert page.context["original"].status == RunStatus.CANCELLED  # the primary's state
        new_page = admin_client.get(
            reverse("admin:django_durable_jobs_jobrun_change", args=[later.pk])
        )
        assert new_page.status_code == 200  # a run the replica has not seen yet

        # An action posted from the list finds its runs on the primary, and acts there.
        response = admin_client.post(
            RUNS, {"action": "cancel_runs", "_selected_action": [later.pk], "confirmed": "yes"}
        )
        assert response.status_code == 302
        assert JobRun.objects.get(pk=later.pk).status == RunStatus.CANCELLED
    finally:
        replay(replica, paused=False)
    caught_up(replica)
    assert on_dashboard(admin_client) == (0, 2)  # the replica has caught up
