"""Sync runs claimed several per round trip, and their outcomes written together: the
batch grows only while its runs are quick, an outcome that cannot wait is written at
once, and a refused outcome holds back none of the others."""

from __future__ import annotations

import logging
import re
from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest

from django_durable_jobs import conf
from django_durable_jobs.db import dialect
from django_durable_jobs.db.claims import requeue_expired
from django_durable_jobs.db.leases import LAPSED
from django_durable_jobs.engine.clock import FakeClock
from django_durable_jobs.models import JobRun, RunStatus
from django_durable_jobs.worker import loop, outbox
from django_durable_jobs.worker.batching import MAX_SYNC_BATCH
from django_durable_jobs.worker.loop import Worker, WorkerOptions
from django_durable_jobs.worker.outcome import batchable, plain
from tests.testapp import fanout_jobs, flow_jobs, hostile_jobs, jobs
from tests.testapp.models import Effect

pytestmark = pytest.mark.django_db(transaction=True)
LEASE = conf.required_duration("LEASE")


def worker(clock: FakeClock, **options: Any) -> Worker:
    return Worker(WorkerOptions(worker_id="w-test", burst=True, **options), clock=clock)


@pytest.fixture
def quick(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every run counts as quick and outcomes may wait, however loaded the machine."""
    monkeypatch.setattr(loop, "QUICK_RUN", 60.0)
    monkeypatch.setattr(outbox, "HOLD_FOR", 60.0)


def claim_sizes(text: str) -> list[int]:
    return [int(m) for m in re.findall(r"runs claimed: (\d+) in one round trip", text)]


def test_quick_sync_runs_are_claimed_and_recorded_in_growing_batches(
    clock: FakeClock, caplog: pytest.LogCaptureFixture, quick: None
) -> None:
    runs = [jobs.add.enqueue(n, 1) for n in range(100)]
    with caplog.at_level(logging.INFO, logger="django_durable_jobs.worker"):
        assert worker(clock).run() == 100
    sizes = claim_sizes(caplog.text)
    assert sizes[:3] == [2, 4, 8]  # after the first claim of one run: doubling
    assert max(sizes) == MAX_SYNC_BATCH
    written = [int(m) for m in re.findall(r"runs recorded: (\d+) in one write", caplog.text)]
    assert sum(written) >= 90 and max(written) > 1
    rows = JobRun.objects.filter(pk__in=[run.pk for run in runs])
    assert {(run.status, run.attempt) for run in rows} == {(RunStatus.SUCCEEDED, 1)}
    assert sorted(int(result or 0) for result in rows.values_list("result", flat=True)) == list(
        range(1, 101)
    )
    assert all(run.lease_owner == "" and run.finished_at is not None for run in rows)


def test_a_slow_sync_run_makes_the_next_claim_take_one_run(
    clock: FakeClock, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(loop, "QUICK_RUN", 0.0)  # every run is slow
    for n in range(12):
        jobs.add.enqueue(n, 1)
    with caplog.at_level(logging.INFO, logger="django_durable_jobs.worker"):
        assert worker(clock).run() == 12
    assert claim_sizes(caplog.text) == []  # one run per claim, throughout
    assert "in one write" not in caplog.text  # nothing held: each outcome with its claim
    assert JobRun.objects.filter(status=RunStatus.SUCCEEDED).count() == 12


def test_an_outcome_held_too_long_is_written_before_the_next_run_starts(
    clock: FakeClock, monkeypatch: pytest.MonkeyPatch, quick: None
) -> None:
    runs = [jobs.add.enqueue(n, 1) for n in range(8)]
    w = worker(clock)
    w._batching.size = 4
    assert w.run_once()  # claims four, executes the first
    assert w.run_once()  # the second: the first's outcome is held
    assert JobRun.objects.filter(status=RunStatus.SUCCEEDED).count() == 0
    monkeypatch.setattr(outbox, "HOLD_FOR", 0.0)  # the first was held too long
    assert w.run_once()  # so both are written before the third run starts
    assert JobRun.objects.filter(status=RunStatus.SUCCEEDED).count() == 2
    while w.run_once():
        pass
    w.flush()
    assert JobRun.objects.filter(pk__in=[run.pk for run in runs]).filter(
        status=RunStatus.SUCCEEDED
    ).count() == len(runs)


def test_an_outcome_that_frees_a_slot_is_held_only_where_one_call_frees_the_batchs(
    clock: FakeClock, quick: None
) -> None:
    limited = flow_jobs.global_limit.enqueue(1, seconds=0)
    w = worker(clock)
    assert w.run_once()
    pending = w._pending
    assert pending is not None and pending.frees_slot and not plain(pending)
    # PostgreSQL: the flow functions free a batch's slots in one call (durable_finish_concurrency);
    # elsewhere freeing a slot takes a transaction of its own, before the next run.
    fused = dialect.of("default").fused
    assert batchable(pending, fused) == fused
    w.flush()
    limited.refresh_from_db()
    assert limited.status == RunStatus.SUCCEEDED


def test_a_refused_outcome_in_a_batch_holds_back_none_of_the_others(
    clock: FakeClock, quick: None
) -> None:
    failing = hostile_jobs.unstorable_error.enqueue("job")
    clock.advance("1s")  # claimed first
    runs = [jobs.add.enqueue(n, 1) for n in range(3)]
    w = worker(clock)
    w._batching.size = 4
    assert w.run_once()  # claims the four, executes the failing one
    assert w.run_once()  # the second; the first's outcome is held
    [held] = w._outbox.held
    assert held.run.pk == failing.pk
    # What no escaping foresaw: texts the database refuses (a NUL on PostgreSQL, a lone
    # surrogate everywhere), in the outcome held with the batch's others.
    bad = {"error": "refused \x00 \udcff", "traceback": "\udcff" * 10, "error_type": "x\udcff"}
    w._outbox.held = [replace(held, changes={**held.changes, **bad})]
    while w.run_once():
        pass
    w.flush()
    failing.refresh_from_db()
    assert failing.status == RunStatus.FAILED and failing.attempt == 1
    assert failing.error.startswith("refused \\x00 \\udcff [recorded in short: ")
    assert (failing.lease_owner, failing.lease_expires_at) == ("", None)
    rows = JobRun.objects.filter(pk__in=[run.pk for run in runs])
    assert {(row.status, row.lease_owner) for row in rows} == {(RunStatus.SUCCEEDED, "")}
    assert sorted(int(result or 0) for result in rows.values_list("result", flat=True)) == [1, 2, 3]


@pytest.mark.postgres(reason="elsewhere the outcome of a limited run is never held")
@pytest.mark.psycopg3(reason="outcomes held for the fused claim are psycopg 3's")
def test_a_refused_outcome_among_limited_ones_holds_back_none_of_the_others(
    clock: FakeClock, quick: None
) -> None:
    runs = [flow_jobs.one_per_key.enqueue(key) for key in ("k0", "k1", "k2")]
    w = worker(clock)
    w._batching.size = 3
    assert w.run_once()  # the flow claim takes the three, executes one
    assert w.run_once()  # the second; the first's outcome is held
    [held] = w._outbox.held
    bad = {
        "status": RunStatus.FAILED,
        "error": "refused \x00 \udcff",
        "traceback": "\udcff" * 10,
        "error_type": "x\udcff",
    }
    w._outbox.held = [replace(held, changes={**held.changes, **bad})]
    while w.run_once():
        pass
    w.flush()
    refused_run = JobRun.objects.get(pk=held.run.pk)
    assert refused_run.status == RunStatus.FAILED
    assert refused_run.error.startswith("refused \\x00 \\udcff [recorded in short: ")
    assert (refused_run.lease_owner, refused_run.lease_expires_at) == ("", None)
    others = JobRun.objects.filter(pk__in=[r.pk for r in runs]).exclude(pk=held.run.pk)
    assert {(row.status, row.lease_owner) for row in others} == {(RunStatus.SUCCEEDED, "")}
    again = flow_jobs.one_per_key.enqueue(refused_run.concurrency_key)  # its slot is free
    assert worker(clock).run() == 1
    again.refresh_from_db()
    assert again.status == RunStatus.SUCCEEDED


def test_a_sync_batch_with_steps_records_each_step_once(clock: FakeClock, quick: None) -> None:
    for n in range(20):
        jobs.three_steps.enqueue(user_id=n)
    assert worker(clock).run() == 20
    assert Effect.objects.filter(name="one").count() == 20
    assert JobRun.objects.filter(status=RunStatus.SUCCEEDED).count() == 20


def test_runs_on_their_last_attempt_are_claimed_in_growing_batches(
    clock: FakeClock, caplog: pytest.LogCaptureFixture, quick: None
) -> None:
    # retries=0, as every django.tasks task: each run is on its last attempt when claimed.
    runs = [fanout_jobs.square.enqueue(n) for n in range(40)]
    with caplog.at_level(logging.INFO, logger="django_durable_jobs.worker"):
        assert worker(clock).run() == 40
    assert claim_sizes(caplog.text)[:3] == [2, 4, 8]  # before: given back, claimed one by one
    rows = JobRun.objects.filter(pk__in=[run.pk for run in runs])
    assert {(row.status, row.attempt) for row in rows} == {(RunStatus.SUCCEEDED, 1)}


def test_runs_of_a_batch_that_never_began_keep_their_attempt_when_the_worker_dies(
    clock: FakeClock, quick: None
) -> None:
    runs = [fanout_jobs.square.enqueue(n) for n in range(4)]  # retries=0: one attempt
    w = worker(clock)
    w._batching.size = 4
    assert w.run_once()  # claims the four, executes the first; three wait in hand
    waiting = [run.pk for run in w._backlog]
    assert len(waiting) == 3
    assert w._beat is not None
    w._beat.stop()  # the worker dies here: nothing renews the leases
    clock.advance(LEASE + timedelta(seconds=1))
    assert requeue_expired(now=clock.now()) == 4  # the first's outcome was held: lost too
    rows = JobRun.objects.filter(pk__in=[run.pk for run in runs])
    # Not known to have begun (no beat recorded the first's start): each keeps its attempt.
    assert set(rows.values_list("status", "attempt", "attempt_started_by")) == {
        (RunStatus.QUEUED, 0, LAPSED)
    }
    assert worker(clock).run() == 4
    assert set(rows.values_list("status", "attempt")) == {(RunStatus.SUCCEEDED, 1)}
    assert Effect.objects.filter(name__startswith="square-").count() == 5  # the first twice


def test_the_heartbeat_records_the_start_of_a_batchs_run_while_it_runs(
    clock: FakeClock, quick: None
) -> None:
    """Within ``heartbeat.RECORD_STARTS_AFTER`` of its start, long before the next beat
    (``HEARTBEAT``, 10 s): a lapse of its lease then counts its attempt."""
    runs = [jobs.waits_for_its_start_record.enqueue(5.0) for _ in range(2)]
    w = worker(clock)
    w._batching.size = 2  # a batch (``LeaseOwner.batch``): the second run waits in hand
    assert w.run() == 2
    rows = JobRun.objects.filter(pk__in=[run.pk for run in runs])
    assert set(rows.values_list("status", "result")) == {(RunStatus.SUCCEEDED, True)}


def test_runs_under_a_limit_claimed_together_free_their_slots(
    clock: FakeClock, quick: None, caplog: pytest.LogCaptureFixture
) -> None:
    """On PostgreSQL the outcomes of a batch of limited runs wait for each other and
    free their slots in one call (durable_finish_concurrency); elsewhere freeing a slot takes a
    transaction of its own, so each is written before the next run starts."""
    for key in ("k0", "k0", "k1", "k2"):
        flow_jobs.one_per_key.enqueue(key)
    w = worker(clock)
    w._batching.size = 4
    assert w.run_once()  # the flow claim takes three (three keys), executes one
    assert len(w._backlog) == 2
    k0 = JobRun.objects.filter(concurrency_key="k0")
    [held] = k0.filter(status=RunStatus.QUEUED)
    assert held.wake_at is None  # the claim saw k0's slot taken: held until it frees
    together = dialect.of("default").fused
    for n in range(2):
        assert w.run_once()
        assert len(w._outbox.held) == (n + 1 if together else 0)
    held.refresh_from_db()
    if together:  # k0's outcome is not written yet: its slot is still taken
        assert held.wake_at is None
    with caplog.at_level(logging.INFO, logger="django_durable_jobs.worker"):
        w.flush()
    if together:
        assert "runs recorded: 3 in one write (3 succeeded)" in caplog.text
    done = JobRun.objects.exclude(pk=held.pk)
    assert {(row.status, row.attempt, row.lease_owner) for row in done} == {
        (RunStatus.SUCCEEDED, 1, "")
    }
    assert not JobRun.objects.filter(status=RunStatus.RUNNING).exists()
    held.refresh_from_db()
    assert held.status == RunStatus.QUEUED and held.wake_at == clock.now()  # let go
