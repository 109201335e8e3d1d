"""Worker rows: registration, beats, lost and pruned workers, the
``jobs workers`` command and the admin page. Real processes: test_workers_processes.py."""

from __future__ import annotations

import json
import os
import socket
import sqlite3
from datetime import timedelta
from io import StringIO
from typing import Any

import pytest
from django.core.management import call_command
from django.test import Client
from django.urls import reverse

from django_durable_jobs.db.claims import claim
from django_durable_jobs.engine.clock import FakeClock
from django_durable_jobs.models import Worker, WorkerStatus
from django_durable_jobs.worker import presence
from django_durable_jobs.worker.loop import Worker as Loop
from django_durable_jobs.worker.loop import WorkerOptions
from tests.testapp import jobs

pytestmark = pytest.mark.django_db

LEASE = timedelta(seconds=60)
KEEP = timedelta(days=1)
WORKERS = reverse("admin:django_durable_jobs_worker_changelist")


def a_presence(name: str = "w1", executed: int = 0) -> presence.Presence:
    return presence.Presence(
        name, queues=["default", "mail"], concurrency=1, lease=LEASE, executed=lambda: executed
    )


def row(name: str = "w1") -> Worker:
    return Worker.objects.get(worker_id=name)


def test_register_records_who_and_where(clock: FakeClock) -> None:
    a_presence().register(clock.now())
    w = row()
    assert (w.host, w.pid, w.queues, w.concurrency) == (
        socket.gethostname(),
        os.getpid(),
        ["default", "mail"],
        1,
    )
    assert (w.status, w.started_at, w.last_heartbeat) == (
        WorkerStatus.LIVE,
        clock.now(),
        clock.now(),
    )
    assert w.version == "0.1.0"


def test_a_restart_with_the_same_id_takes_the_row_over(clock: FakeClock) -> None:
    a_presence(executed=5).register(clock.now())
    presence.stopped("w1", now=clock.now(), executed=5)
    clock.advance("1m")
    a_presence().register(clock.now())
    w = row()
    assert (Worker.objects.count(), w.status, w.started_at, w.executed) == (
        1,
        WorkerStatus.LIVE,
        clock.now(),
        0,
    )


def test_beat_is_one_update_with_the_executed_count(
    clock: FakeClock, django_assert_num_queries: Any
) -> None:
    p = a_presence(executed=7)
    p.register(clock.now())
    p.beat(clock.now())  # the first beat also sweeps
    clock.advance("10s")
    with django_assert_num_queries(1):
        p.beat(clock.now())
    assert (row().last_heartbeat, row().executed) == (clock.now(), 7)


def test_silent_worker_is_lost_after_its_lease_then_pruned(clock: FakeClock) -> None:
    a_presence("dead").register(clock.now())
    clock.advance(LEASE)
    assert presence.sweep(now=clock.now(), lease=LEASE, keep=KEEP) == (0, 0)  # not yet
    assert presence.listing(now=clock.now())[0]["alive"]
    clock.advance("1s")
    # Shown as lost before any sweep marks it: the last beat decides.
    [shown] = presence.listing(now=clock.now())
    assert (shown["alive"], shown["status"]) == (False, "lost")
    assert presence.sweep(now=clock.now(), lease=LEASE, keep=KEEP) == (1, 0)
    assert row("dead").status == WorkerStatus.LOST
    clock.advance(KEEP)
    assert presence.sweep(now=clock.now(), lease=LEASE, keep=KEEP) == (0, 1)
    assert not Worker.objects.exists()


def test_lost_worker_that_beats_again_is_live_but_stopped_stays_stopped(clock: FakeClock) -> None:
    frozen, done = a_presence("frozen"), a_presence("done")
    frozen.register(clock.now())
    done.register(clock.now())
    done.stopped(clock.now())
    clock.advance(LEASE * 2)
    presence.sweep(now=clock.now(), lease=LEASE, keep=KEEP)
    frozen.beat(clock.now())  # e.g. a long stop-the-world pause ended
    done.beat(clock.now())  # a beat racing the goodbye
    assert row("frozen").status == WorkerStatus.LIVE
    assert row("done").status == WorkerStatus.STOPPED


def test_pruned_worker_registers_again_at_its_next_beat(clock: FakeClock) -> None:
    p = a_presence()
    p.register(clock.now())
    Worker.objects.all().delete()
    p.beat(clock.now())
    assert row().status == WorkerStatus.LIVE


@pytest.mark.django_db(transaction=True)
def test_worker_loop_registers_counts_and_says_goodbye(clock: FakeClock) -> None:
    for _ in range(3):
        jobs.noop.enqueue()
    loop = Loop(WorkerOptions(worker_id="loop", burst=True, queues=["default"]), clock=clock)
    assert loop.run() == 3
    w = row("loop")
    assert (w.status, w.executed, w.queues, w.pid) == (
        WorkerStatus.STOPPED,
        3,
        ["default"],
        os.getpid(),
    )


def test_runs_in_hand_are_matched_by_lease_owner(clock: FakeClock) -> None:
    a_presence("w1").register(clock.now())
    a_presence("w1-other").register(clock.now())
    run = jobs.noop.enqueue()
    claim("w1#abcd1234", now=clock.now(), lease=LEASE)
    held = presence.runs_in_hand(["w1", "w1-other"])
    assert held == {"w1": [presence.InHand(run.id, "tests.noop")]}


def test_jobs_workers_json_has_the_spec_fields(clock: FakeClock) -> None:
    a_presence("w1").register(clock.now())
    run = jobs.noop.enqueue()
    claim("w1#abcd1234", now=clock.now(), lease=LEASE)
    out = StringIO()
    call_command("jobs", "workers", "--json", stdout=out)
    [listed] = json.loads(out.getvalue())
    assert {"worker_id", "host", "pid", "queues", "started_at", "last_heartbeat", "alive"} <= set(
        listed
    )
    assert (listed["worker_id"], listed["pid"], listed["alive"]) == ("w1", os.getpid(), True)
    assert listed["queues"] == ["default", "mail"]
    assert listed["runs_in_hand"] == [{"run_id": str(run.id), "job_name": "tests.noop"}]


def test_jobs_workers_table(clock: FakeClock) -> None:
    out = StringIO()
    call_command("jobs", "workers", stdout=out)
    assert out.getvalue().strip() == "no workers have registered"
    a_presence("wörker-ü").register(clock.now())
    clock.advance(LEASE * 2)
    out = StringIO()
    call_command("jobs", "workers", stdout=out)
    header, line = out.getvalue().splitlines()[:2]
    assert header.split()[:2] == ["worker", "status"]
    assert line.split()[:2] == ["wörker-ü", "lost"]
    assert "default,mail" in line


def test_admin_lists_workers_with_their_runs_in_hand(
    admin_client: Client, clock: FakeClock, django_assert_num_queries: Any
) -> None:
    for i in range(5):
        a_presence(f"w{i}").register(clock.now())
    run = jobs.noop.enqueue()
    claim("w3#abcd1234", now=clock.now(), lease=LEASE)
    admin_client.get(WORKERS)  # warm the session and content types
    # session, user, count, workers, runs in hand: however many workers.
    with django_assert_num_queries(5):
        page = admin_client.get(WORKERS)
    html = page.content.decode()
    assert page.status_code == 200
    run_url = reverse("admin:django_durable_jobs_jobrun_change", args=[run.id])
    # The job name and the id each on one line (admin/display.job_label, ident).
    assert (
        f'<a href="{run_url}"><span class="djdj-job">tests.noop</span> '
        f'<span class="djdj-id">{str(run.id)[:8]}</span></a>'
    ) in html
    assert html.count("djdj-badge--live") == 5
    assert "default, mail" in html


def test_a_heartbeat_just_written_reads_just_now(admin_client: Client, clock: FakeClock) -> None:
    a_presence("fresh").register(clock.now())
    a_presence("quiet").register(clock.now() - timedelta(seconds=90))
    html = admin_client.get(WORKERS).content.decode()
    # Each row shows two times, started and last heartbeat.
    assert html.count('<span class="djdj-ago">(just now)</span>') == 2
    assert html.count('<span class="djdj-ago">(1m30s ago)</span>') == 2
    # Not "0ms ago" (a page's random CSRF token may hold "0ms": it failed CI once).
    assert "0ms ago" not in html


def test_admin_workers_page_is_read_only(admin_client: Client, clock: FakeClock) -> None:
    a_presence().register(clock.now())
    assert admin_client.get(reverse("admin:django_durable_jobs_worker_add")).status_code == 403
    page = admin_client.get(reverse("admin:django_durable_jobs_worker_change", args=[row().pk]))
    assert page.status_code == 200
    assert b"_save" not in page.content


@pytest.mark.sqlite(reason="SQLite: a read cannot become a write once another process wrote")
@pytest.mark.django_db(transaction=True)
def test_registering_while_another_process_writes_does_not_fail_on_sqlite(clock: FakeClock) -> None:
    """The children of ``runjobs --concurrency 2`` register at the same moment: one read
    the worker table, the other wrote, and the first one's write failed at once with
    "database is locked" (a warning at nearly every start, then a retry). Here another
    connection writes right after the registration's first read, without waiting (a
    process would wait): before, the registration then raised."""
    from django.db import connection

    other = sqlite3.connect(connection.settings_dict["NAME"], timeout=0)
    other.execute("CREATE TABLE race_probe (x INTEGER)")
    other.commit()
    written: list[bool] = []

    def write_between(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        result = execute(sql, params, many, context)
        if not written and sql.lstrip().upper().startswith("SELECT") and "worker" in sql:
            try:
                other.execute("INSERT INTO race_probe VALUES (1)")  # a real change
                other.commit()
                written.append(True)
            except sqlite3.OperationalError:  # the registration holds the write lock
                written.append(False)
        return result

    try:
        with connection.execute_wrapper(write_between):
            presence.register("w-race", queues=None, concurrency=2, now=clock.now())
    finally:
        other.execute("DROP TABLE race_probe")
        other.close()
    assert written == [False]  # the write lock was the registration's before it read
    assert row("w-race").status == WorkerStatus.LIVE
