"""The lease owner is a value with pieces, written by the worker's claim and read
back by the admin's worker list and django.tasks' ``worker_id`` without a regex."""

from __future__ import annotations

from datetime import timedelta

import pytest

from django_durable_jobs.db.claims import claim
from django_durable_jobs.db.leases import LeaseOwner
from django_durable_jobs.engine.clock import FakeClock
from django_durable_jobs.worker.presence import owner_worker_id
from tests.testapp import jobs


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
    [run] = claim(str(owner), now=clock.now(), lease=timedelta(minutes=1))
    run.refresh_from_db()
    assert LeaseOwner.parse(run.lease_owner) == owner
