"""The run page reads like a story: the timeline first, one date format with relative
times, a wait's event, key and deadline in full, and a live run refreshing itself."""

from __future__ import annotations

import re
from datetime import timedelta
from zoneinfo import ZoneInfo

import pytest
from django.test import Client
from django.urls import reverse
from django.utils import timezone, translation

from django_durable_jobs.admin.times import shown
from django_durable_jobs.engine.clock import FakeClock
from django_durable_jobs.models import JobRun, RunStatus, StepStatus
from tests.factories import T0, JobRunFactory, StepRecordFactory
from tests.testapp.flow_jobs import welcome_once

pytestmark = pytest.mark.django_db


def page(client: Client, run: JobRun) -> str:
    response = client.get(reverse("admin:django_durable_jobs_jobrun_change", args=[run.pk]))
    assert response.status_code == 200
    return response.content.decode()


def waiting_run(clock: FakeClock) -> JobRun:
    clock.set(T0 + timedelta(minutes=5))
    run = JobRunFactory.create(
        status=RunStatus.WAITING,
        created_at=T0,
        started_at=T0 + timedelta(seconds=1),
        wake_at=T0 + timedelta(minutes=5, seconds=30),
    )
    StepRecordFactory.create(
        run=run,
        name="wait-for-the-order-of-a-customer-with-a-long-name",
        kind="wait",
        status=StepStatus.WAITING,
        started_at=T0 + timedelta(seconds=2),
        completed_at=None,
        output=None,
        event="order.paid.with-a-very-long-event-name",
        correlation_key="customer-4242-ünïcode",
        event_cursor=0,
        wake_at=T0 + timedelta(minutes=5, seconds=30),
        deadline=T0 + timedelta(days=7, seconds=2),
        attempts=1,
    )
    return run


def test_timeline_comes_before_the_fields(admin_client: Client, clock: FakeClock) -> None:
    html = page(admin_client, waiting_run(clock))
    assert html.index('id="timeline"') < html.index('class="djdj-fields"')


def details(html: str) -> list[tuple[str, str, str]]:
    """The details block's (classes, label, value HTML), in order."""
    block = re.search(r'<dl class="djdj-fields">\n(.*?)\n</dl>', html, re.S)
    assert block is not None, "no details block"
    pairs = re.findall(
        r'  <dt((?: class="[^"]*")?)>([^<]*)</dt><dd\1>(.*?)</dd>\n', block.group(1) + "\n", re.S
    )
    assert len(pairs) == block.group(1).count("<dt")  # every pair parsed
    return [(classes[8:-1], label, value) for classes, label, value in pairs]


RUN_LABELS = [
    "id", "status", "job name", "job version", "queue", "priority", "attempt",
    "idempotency key", "parent run", "child runs", "created", "first started", "finished",
    "took", "wakes", "not starting", "lease owner", "lease expires", "args", "kwargs",
]  # fmt: skip


def test_details_are_one_aligned_block_not_fieldset_rows(
    admin_client: Client, clock: FakeClock
) -> None:
    html = page(admin_client, waiting_run(clock))
    shown = details(html)
    assert [label for _, label, _ in shown] == RUN_LABELS  # every field of the old rows
    assert "form-row" not in html and "<fieldset" not in html
    classes = {label: set(found.split()) for found, label, _ in shown}
    # Pairs share a row (the second without "first"), a list or JSON spans it, and each
    # group after the first starts with a hairline.
    assert classes["id"] == {"djdj-field--first"} and classes["status"] == set()
    assert classes["child runs"] == {"djdj-field--first", "djdj-field--wide"}
    assert classes["created"] == {"djdj-field--first", "djdj-field--group"}
    assert classes["first started"] == {"djdj-field--group"}
    assert classes["args"] == {"djdj-field--first", "djdj-field--wide", "djdj-field--group"}
    values = {label: value for _, label, value in shown}
    assert values["idempotency key"] == "—" and values["queue"] == "default"


def test_a_finished_runs_details_add_its_result_or_its_error(
    admin_client: Client, clock: FakeClock
) -> None:
    done = JobRunFactory.create(status=RunStatus.SUCCEEDED, result={"sent": 3}, finished_at=T0)
    assert [label for _, label, _ in details(page(admin_client, done))] == [*RUN_LABELS, "result"]
    failed = JobRunFactory.create(
        status=RunStatus.FAILED,
        error_code="X_JOB_TIMEOUT",
        error_type="JobTimeout",
        error="took too long",
        traceback="Traceback (most recent call last): ...",
    )
    shown = details(page(admin_client, failed))
    assert [label for _, label, _ in shown] == [
        *RUN_LABELS, "error code", "error type", "error", "traceback",
    ]  # fmt: skip
    assert ("djdj-field--first djdj-field--group", "error code", "X_JOB_TIMEOUT") in shown


def test_the_flow_keys_a_run_holds_show_two_a_row(admin_client: Client, clock: FakeClock) -> None:
    run = JobRunFactory.create(
        concurrency_key="customer-42",
        concurrency_limit=2,
        throttle_key="",  # a throttle over every run of the job
        throttle_limit=5,
        throttle_period=timedelta(seconds=1),
        debounce_key="user-<7>",
    )
    shown = details(page(admin_client, run))
    keys = ["concurrency key", "throttle key", "debounce key"]
    assert [label for _, label, _ in shown] == [*RUN_LABELS[:10], *keys, *RUN_LABELS[10:]]
    values = {label: value for _, label, value in shown}
    assert values["concurrency key"] == "customer-42"
    assert values["throttle key"] == "(every run of the job)"  # not "—": it is a key
    assert values["debounce key"] == "user-&lt;7&gt;"  # escaped
    # A group of its own after the run's ids, two keys a row.
    classes = {label: set(found.split()) for found, label, _ in shown}
    assert classes["concurrency key"] == {"djdj-field--first", "djdj-field--group"}
    assert classes["throttle key"] == {"djdj-field--group"}
    assert classes["debounce key"] == {"djdj-field--first", "djdj-field--wide"}
    assert classes["created"] == {"djdj-field--first", "djdj-field--group"}


def test_a_rate_limited_run_shows_its_key_alone(admin_client: Client, clock: FakeClock) -> None:
    run = welcome_once.enqueue(user_id=7)
    shown = details(page(admin_client, run))
    assert [label for _, label, _ in shown] == [
        *RUN_LABELS[:10], "rate limit key", *RUN_LABELS[10:]
    ]  # fmt: skip
    assert ("djdj-field--first djdj-field--wide djdj-field--group", "rate limit key", "7") in shown


def test_short_json_is_one_line_long_json_is_pretty_printed(
    admin_client: Client, clock: FakeClock
) -> None:
    # One key: PostgreSQL's jsonb keeps keys in an order of its own.
    run = JobRunFactory.create(args=[1], kwargs={"note": "x" * 80})
    values = {label: value for _, label, value in details(page(admin_client, run))}
    assert values["args"] == '<code class="djdj-json djdj-json--inline">[1]</code>'
    note = "x" * 80
    assert values["kwargs"] == (
        f'<pre class="djdj-json">{{\n  &quot;note&quot;: &quot;{note}&quot;\n}}</pre>'
    )


def test_one_date_format_with_relative_times(admin_client: Client, clock: FakeClock) -> None:
    """Every time on the page in the project's DATETIME_FORMAT (as Django's admin shows
    a model's date fields), in the current time zone: the event's page, the schedules'
    and the run page agree."""
    html = page(admin_client, waiting_run(clock))
    created = shown(T0)
    assert created == "Jan. 1, 2026, midnight"  # Django's English format by default
    ago = '<span class="djdj-ago">(5m ago)</span>'
    assert f'title="{T0.isoformat()}">{created}</time> {ago}' in html
    # "wakes" of a waiting run is its wait's deadline, not its next poll (00:05:30).
    deadline = T0 + timedelta(days=7, seconds=2)
    assert f'>{shown(deadline)}</time> <span class="djdj-ago">(in 6d23h)</span>' in html
    assert "2026-01-01 00:00:00" not in html  # no format of our own beside Django's
    assert ">-<" not in html  # one mark for "nothing": —
    with translation.override("de"), timezone.override(ZoneInfo("Europe/Berlin")):
        assert shown(T0) == "1. Januar 2026 01:00"  # the language's format, the zone's time


def test_wait_shows_event_key_and_deadline_in_full(admin_client: Client, clock: FakeClock) -> None:
    html = page(admin_client, waiting_run(clock))
    assert "<code>order.paid.with-a-very-long-event-name</code>" in html
    assert "key <code>customer-4242-ünïcode</code>" in html
    deadline, poll = T0 + timedelta(days=7, seconds=2), T0 + timedelta(minutes=5, seconds=30)
    assert f"<dt>gives up</dt><dd>{shown(deadline)}</dd>" in html
    assert f"<dt>next check</dt><dd>{shown(poll)}</dd>" in html


def test_live_run_refreshes_finished_run_does_not(admin_client: Client, clock: FakeClock) -> None:
    run = waiting_run(clock)
    assert 'data-djdj-refresh="5"' in page(admin_client, run)
    assert "refresh.js" in page(admin_client, run)
    JobRun.objects.filter(pk=run.pk).update(
        status=RunStatus.SUCCEEDED, finished_at=clock.now(), wake_at=None
    )
    assert "data-djdj-refresh" not in page(admin_client, run)


def test_parent_and_children_link_each_other(admin_client: Client, clock: FakeClock) -> None:
    parent = JobRunFactory.create(status=RunStatus.WAITING, started_at=T0)
    children = [JobRunFactory.create(parent=parent, job_name="tests.child") for _ in range(3)]
    StepRecordFactory.create(
        run=parent,
        name="fan-out",
        kind="invoke",
        status=StepStatus.WAITING,
        output=None,
        completed_at=None,
        child=children[0].pk,
    )
    html = page(admin_client, parent)
    for child in children:
        assert f'<a href="{change_url(child)}">tests.child {str(child.pk)[:8]}</a>' in html
    # The invoke step's details link the child in full.
    assert f'<dt>child run</dt><dd><a href="{change_url(children[0])}">{children[0].pk}</a>' in html
    assert f'<a href="{change_url(parent)}">{parent.pk}</a>' in page(admin_client, children[1])


def test_a_big_fan_out_lists_the_first_children_and_links_the_rest(
    admin_client: Client, clock: FakeClock
) -> None:
    parent = JobRunFactory.create(status=RunStatus.WAITING, started_at=T0)
    JobRun.objects.bulk_create(
        JobRun(job_name="tests.child", parent=parent, created_at=T0, wake_at=T0) for _ in range(60)
    )
    html = page(admin_client, parent)
    assert html.count("tests.child ") == 50
    listing = re.search(r'href="([^"]+)">all child runs<', html)
    assert listing is not None
    response = admin_client.get(listing.group(1).replace("&amp;", "&"))
    assert response.status_code == 200
    listed = response.content.decode()
    assert "60 results" in listed  # the children, not the parent nor other runs
    assert f'<span class="djdj-id">{str(parent.pk)[:8]}</span></a>' not in listed  # not a row


def change_url(run: JobRun) -> str:
    return reverse("admin:django_durable_jobs_jobrun_change", args=[run.pk])


def test_a_failed_steps_error_names_its_type_as_a_traceback_does(admin_client: Client) -> None:
    run = JobRunFactory.create(status=RunStatus.FAILED, finished_at=T0)
    StepRecordFactory.create(
        run=run,
        name="charge-card",
        status=StepStatus.FAILED,
        output=None,
        error_type="builtins.ValueError",
        error="card declined",
    )
    html = page(admin_client, run)
    assert '<p class="djdj-error">ValueError: card declined</p>' in html
    assert "builtins." not in html
