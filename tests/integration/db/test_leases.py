"""The lease owner is a value with pieces, written by the worker's claim and read
back by the admin's worker list and django.tasks' ``worker_id`` without a regex; and
what a lapsed lease does with the attempt in hand."""

from __future__ import annotations

from datetime import timedelta

import pytest

from django_durable_jobs.db.claims import (
    claim,
    record_starts,
    renew_held,
    requeue_expired,
    start_needs_record,
)
from django_durable_jobs.db.leases import LAPSED, LeaseOwner
from django_durable_jobs.engine.clock import FakeClock
from django_durable_jobs.models import RunStatus
from django_durable_jobs.worker.loop import Worker, WorkerOptions
from django_durable_jobs.worker.presence import owner_worker_id
from tests.testapp import fanout_jobs, jobs
from tests.testapp.models import Effect

LEASE = timedelta(minutes=1)


def test_an_owner_reads_back_as_the_worker_and_the_claim() -> None:
    owner = LeaseOwner.new("host:12/0:345")
    assert len(owner.claim) == 8 and owner != LeaseOwner.new("host:12/0:345")
    assert LeaseOwner.parse(str(owner)) == owner
    assert owner_worker_id(str(owner)) == "host:12/0:345"


def test_a_worker_id_may_hold_the_separator_and_plain_owners_are_whole() -> None:
    owner = LeaseOwner.new("odd#name")
    assert LeaseOwner.parse(str(owner)) == owner and owner.worker_id == "odd#name"
    assert LeaseOwner.parse("inline-tests") == LeaseOwner("inline-tests")
    assert str(LeaseOwner("inline-tests")) == "inline-tests"
    assert LeaseOwner.parse("") == LeaseOwner("")


@pytest.mark.django_db
def test_the_claim_stores_the_owner_it_was_given(clock: FakeClock) -> None:
    jobs.add.enqueue(1, 2)
    owner = LeaseOwner.new("w-1")
    [run] = claim(str(owner), now=clock.now(), lease=LEASE)
    run.refresh_from_db()
    assert LeaseOwner.parse(run.lease_owner) == owner


def test_a_batch_owner_says_so_and_reads_back_as_one() -> None:
    batch, alone = LeaseOwner.new("w-1", batch=True), LeaseOwner.new("w-1")
    assert batch.batch and not alone.batch
    assert LeaseOwner.parse(str(batch)) == batch and LeaseOwner.parse(str(batch)).batch
    assert owner_worker_id(str(batch)) == "w-1"
    assert not LeaseOwner.parse("inline-tests").batch
    for text in (str(batch), str(alone), "inline-tests", "odd+", "#x+", "odd#name#x+", ""):
        assert LeaseOwner.of_batch(text) == LeaseOwner.parse(text).batch, text


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("batch", "began", "attempt"),
    [
        (False, False, 1),  # a claim of one run begins it at once: the attempt counts
        (True, False, 0),  # a batch's run not known to have begun keeps its attempt
        (True, True, 1),  # its start was recorded: the attempt counts
    ],
)
def test_a_lapsed_lease_counts_the_attempt_unless_a_batch_run_was_not_known_to_begin(
    clock: FakeClock, batch: bool, began: bool, attempt: int
) -> None:
    run = jobs.add.enqueue(1, 2)
    owner = str(LeaseOwner.new("w-1", batch=batch))
    [claimed] = claim(owner, now=clock.now(), lease=LEASE)
    started = [claimed.pk] if began else []  # as the heartbeat records a batch's starts
    assert renew_held({claimed.pk: owner}, now=clock.now(), lease=LEASE, started=started) == 1
    clock.advance(LEASE * 2)
    assert requeue_expired(now=clock.now()) == 1
    run.refresh_from_db()
    assert (run.status, run.attempt, run.lease_owner) == (RunStatus.QUEUED, attempt, "")
    assert run.attempt_started_by == LAPSED


@pytest.mark.django_db
def test_a_run_that_kills_its_worker_as_it_begins_keeps_its_attempt_once_in_a_row(
    clock: FakeClock,
) -> None:
    run = fanout_jobs.square.enqueue(1)  # retries=0: one attempt
    for _ in range(2):  # its batch's worker dies as it begins, before a beat
        owner = str(LeaseOwner.new("w-1", batch=True))
        [claimed] = claim(owner, now=clock.now(), lease=LEASE, limit=2)
        if start_needs_record(claimed, owner):  # as the worker does before it begins
            assert record_starts([claimed.pk], owner) == 1
        clock.advance(LEASE * 2)
        assert requeue_expired(now=clock.now()) == 1
    run.refresh_from_db()
    # The first lapse gave the attempt back; the second was recorded before it began.
    assert (run.status, run.attempt) == (RunStatus.QUEUED, 1)
    w = Worker(WorkerOptions(worker_id="w-2", burst=True), clock=clock)
    assert w.run_once()
    w.flush()
    run.refresh_from_db()
    assert (run.status, run.error_code) == (RunStatus.FAILED, "X_ATTEMPTS_EXHAUSTED")
    assert not Effect.objects.exists()  # never executed here: the worker that died did
