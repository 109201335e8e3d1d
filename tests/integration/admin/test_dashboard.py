"""The admin dashboard: per-minute and per-hour series, chart geometry and
the page through the real admin client, with its query count pinned."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth.models import Permission, User
from django.db import connection
from django.test import Client
from django.urls import reverse

from django_durable_jobs.engine.clock import FakeClock
from django_durable_jobs.models import RunStatus
from django_durable_jobs.observe import charts, stats
from tests.factories import JobRunFactory

pytestmark = pytest.mark.django_db

DASHBOARD = reverse("admin:django_durable_jobs_dashboard_changelist")
MINUTE = timedelta(minutes=1)


def ran(clock: FakeClock, minutes_ago: float, status: str = RunStatus.SUCCEEDED) -> None:
    end = clock.now() - timedelta(minutes=minutes_ago)
    JobRunFactory.create(
        job_name="shop.sync",
        status=status,
        created_at=end - timedelta(seconds=2),
        started_at=end - timedelta(seconds=2),
        finished_at=end,
        error_code="X_JOB_TIMEOUT" if status == RunStatus.FAILED else "",
    )


def test_series_buckets_by_minute(clock: FakeClock) -> None:
    clock.advance("10h30m20s")  # 10:30:20 UTC: the last bucket is 10:30
    ran(clock, 0)
    ran(clock, 0.1, RunStatus.FAILED)
    ran(clock, 5)
    ran(clock, 61)  # outside the hour
    got = stats.series(clock.now(), step=MINUTE, buckets=60)
    assert got.starts[-1].isoformat() == "2026-01-01T10:30:00+00:00"
    assert got.starts[0] == got.starts[-1] - 59 * MINUTE
    assert got.counts["succeeded"][-1] == 1 and got.counts["failed"][-1] == 1
    assert got.counts["succeeded"][-6] == 1
    assert sum(got.counts["succeeded"]) == 2
    assert sum(got.counts["started"]) == 3
    hourly = stats.series(clock.now(), step=timedelta(hours=1), buckets=24)
    assert hourly.starts[-1].isoformat() == "2026-01-01T10:00:00+00:00"
    assert hourly.counts["succeeded"][-1] == 2 and hourly.counts["succeeded"][-2] == 1


def test_line_chart_geometry() -> None:
    chart = charts.line_chart({"a": [0, 3, 7], "b": [0, 0, 0]}, ["x", "y", "z"], tick_every=2)
    assert chart.top == 10  # 7 rounded up to a nice number
    assert chart.lines[0].points == "40.0,150.0 340.0,105.0 640.0,45.0"
    assert chart.lines[1].total == 0
    assert [(t.x, t.label) for t in chart.ticks] == [(40.0, "x"), (640.0, "z")]
    assert charts.nice_ceiling(0.5) == 1 and charts.nice_ceiling(11) == 20
    assert charts.nice_ceiling(5001) == 10_000


def test_stacked_bars_scale_to_the_longest() -> None:
    bars = charts.stacked_bars({"a": {"queued": 3, "running": 1}, "b": {"queued": 0, "running": 2}})
    assert [(s.key, s.x, s.width) for s in bars[0].segments] == [
        ("queued", 0.0, 75.0),
        ("running", 75.0, 25.0),
    ]
    assert [(s.key, s.width) for s in bars[1].segments] == [("running", 50.0)]


def test_dashboard_page(
    admin_client: Client, clock: FakeClock, django_assert_num_queries: Any
) -> None:
    for minutes in (1, 2, 2, 30):
        ran(clock, minutes)
    ran(clock, 3, RunStatus.FAILED)
    JobRunFactory.create(status=RunStatus.QUEUED, queue="mail", wake_at=clock.now() - MINUTE)
    admin_client.get(DASHBOARD)  # warm the session
    # session, user, 10 figures (PostgreSQL: a bounded count per status, +7, and the
    # oldest due run per priority in use, +2), the pauses, 2 x 2 series, and the hours'
    # and the minutes' rollups, read once for the figures and the charts: the same for
    # ten million runs
    with django_assert_num_queries(19 + (9 if connection.vendor == "postgresql" else 0)):
        page = admin_client.get(DASHBOARD)
    assert page.status_code == 200
    html = page.content.decode()
    assert html.count('class="djdj-chart"') == 2
    assert (
        len(re.findall(r'<polyline class="djdj-line djdj-line--(started|succeeded|failed)"', html))
        == 6
    )
    assert "succeeded 4</li>" in html and "failed 1</li>" in html
    assert ">1m</span>" in html  # the oldest runnable run waits a minute
    assert "X_JOB_TIMEOUT" in html
    assert 'data-djdj-refresh="30"' in html and "refresh.js" in html
    assert "<script>" not in html.split('id="djdj-dashboard"')[1]  # no inline script


def test_the_last_hour_card_counts_what_the_per_minute_chart_counts(
    admin_client: Client, clock: FakeClock
) -> None:
    clock.advance("12h45s")  # 12:00:45: the chart's first minute is 11:01
    ran(clock, 59.8)  # 11:00:57, in the rolling hour but before the chart's first minute
    ran(clock, 59.1)  # 11:01:39
    ran(clock, 2, RunStatus.FAILED)
    html = admin_client.get(DASHBOARD).content.decode()
    card = re.search(
        r"started / succeeded / failed since (\d\d:\d\d)</span>\s*"
        r'<span class="djdj-card__value">(\d+) / (\d+) / (\d+)</span>',
        html,
    )
    assert card is not None
    assert card.groups() == ("11:01", "2", "1", "1")
    legend = re.findall(r'<li class="djdj-key djdj-key--\w+">(\w+) (\d+)</li>', html)[:3]
    assert legend == [("started", "2"), ("succeeded", "1"), ("failed", "1")]
    assert "Last hour, per minute since 11:01" in html
    # The per-hour chart's 24 buckets start at 13:00 yesterday (not a rolling day).
    assert "Last day, per hour since 13:00" in html


def test_dashboard_is_in_the_app_index(admin_client: Client) -> None:
    page = admin_client.get(reverse("admin:app_list", args=["django_durable_jobs"]))
    assert f'href="{DASHBOARD}"' in page.content.decode()


def test_dashboard_needs_the_view_permission_on_runs(django_user_model: type[User]) -> None:
    user = django_user_model.objects.create_user("staff", password="pw", is_staff=True)
    client = Client()
    client.force_login(user)
    assert client.get(DASHBOARD).status_code == 403
    user.user_permissions.add(Permission.objects.get(codename="view_jobrun"))
    assert client.get(DASHBOARD).status_code == 200


def test_top_errors_show_the_exception_type_of_a_failure_without_a_code(
    admin_client: Client, clock: FakeClock
) -> None:
    for _ in range(2):
        ran(clock, 3, RunStatus.FAILED)
        JobRunFactory.create(
            status=RunStatus.FAILED,
            finished_at=clock.now() - MINUTE,
            error_type="builtins.ValueError",
            error="card declined",
        )
    JobRunFactory.create(
        status=RunStatus.FAILED, finished_at=clock.now() - MINUTE, error_type="builtins.KeyError"
    )
    html = admin_client.get(DASHBOARD).content.decode()
    panel = html.split("Top errors, last day")[1]
    rows = re.findall(
        r'<th scope="row"><a href="([^"]+)">([^<]+)</a></th>.*?djdj-bars__n">(\d+)<', panel, re.S
    )
    assert [(error, n) for _, error, n in rows] == [
        ("ValueError", "2"),
        ("X_JOB_TIMEOUT", "2"),
        ("KeyError", "1"),
    ]
    assert "(none)" not in panel
    # Each error links to its failed runs, found by the runs list's search.
    link = rows[0][0].replace("&amp;", "&")
    assert link.endswith("?status__exact=failed&q=ValueError")
    listed = admin_client.get(link).content.decode()
    errors = re.findall(r'<span class="djdj-error" title="([^"]*)"', listed)
    assert errors == ["ValueError: card declined"] * 2
