"""The heartbeat's beat never waits for a row lock: a run whose row another
transaction holds is left to the next beat, and the others are renewed at once.

Waiting, a beat and its own worker's outcome write (which locks the finished runs'
rows in another order) deadlocked on PostgreSQL, and one of the two stalled for
``deadlock_timeout`` before it was cancelled.
"""

from __future__ import annotations

import logging
import threading
from datetime import timedelta
from typing import Any
from uuid import UUID

import pytest
from django.db import connections, transaction
from django.test.utils import CaptureQueriesContext

from django_durable_jobs.db import claims
from django_durable_jobs.db.claims import claim
from django_durable_jobs.db.leases import LeaseOwner
from django_durable_jobs.engine.clock import FakeClock
from django_durable_jobs.models import JobRun, RunStatus
from django_durable_jobs.worker import heartbeat
from django_durable_jobs.worker.heartbeat import Heartbeat
from tests.testapp import jobs

pytestmark = pytest.mark.django_db(transaction=True)

LEASE = timedelta(minutes=1)
#: Generous: a beat that does not wait returns in milliseconds.
WITHIN = 10.0


class RowHolder:
    """A second connection (a thread) that holds ``run_id``'s row until ``let_go``."""

    def __init__(self, run_id: UUID) -> None:
        self.run_id = run_id
        self.holding, self.release = threading.Event(), threading.Event()
        self.thread = threading.Thread(target=self._hold)

    def _hold(self) -> None:
        try:
            with transaction.atomic():
                list(JobRun.objects.select_for_update().filter(pk=self.run_id))
                self.holding.set()
                self.release.wait(30)
        finally:
            connections.close_all()

    def __enter__(self) -> RowHolder:
        self.thread.start()
        assert self.holding.wait(WITHIN), "the second connection did not lock the row"
        return self

    def __exit__(self, *exc: object) -> None:
        self.release.set()
        self.thread.join(WITHIN)


def two_runs_in_hand(clock: FakeClock) -> tuple[str, list[JobRun], Heartbeat]:
    """Two runs claimed in one batch, held by a heartbeat that never beats on its own."""
    jobs.noop.enqueue()
    jobs.noop.enqueue()
    owner = str(LeaseOwner.new("w-1", batch=True))
    runs = claim(owner, now=clock.now(), lease=LEASE, limit=2)
    beat = Heartbeat(clock, LEASE, timedelta(seconds=10))
    for run in runs:
        beat.hold(owner, run.pk)
    return owner, runs, beat


def test_a_beat_leaves_a_run_whose_row_is_held_and_renews_it_at_the_next_beat(
    clock: FakeClock,
) -> None:
    if not connections["default"].features.has_select_for_update_skip_locked:
        pytest.skip("SQLite has no row locks: a write waits for the one write lock")
    owner, (held, free), beat = two_runs_in_hand(clock)
    for run in (held, free):
        beat.begin(run.pk)
    clock.advance(timedelta(seconds=20))

    def beat_once() -> None:
        try:
            beat.beat()
        finally:
            connections.close_all()  # with Django's pool: given back

    with RowHolder(held.pk):
        beating = threading.Thread(target=beat_once)
        beating.start()
        beating.join(WITHIN)
        assert not beating.is_alive(), "the beat waited for the held row"

    held.refresh_from_db()
    free.refresh_from_db()
    assert free.lease_expires_at == clock.now() + LEASE
    assert free.attempt_started_by == owner
    assert held.lease_expires_at == clock.now() - timedelta(seconds=20) + LEASE
    assert held.attempt_started_by == ""  # its start is still to record

    clock.advance(timedelta(seconds=20))
    beat.beat()
    held.refresh_from_db()
    assert held.lease_expires_at == clock.now() + LEASE
    assert held.attempt_started_by == owner


def test_a_beat_names_the_run_another_worker_took_over_and_renews_the_rest(
    clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    _, (lost, kept), beat = two_runs_in_hand(clock)
    JobRun.objects.filter(pk=lost.pk).update(lease_owner="w-other")  # its lease lapsed
    with caplog.at_level(logging.WARNING, logger="django_durable_jobs.worker"):
        beat.beat()
    assert f"run {lost.pk}: lease lost (status running)" in caplog.text
    kept.refresh_from_db()
    assert kept.lease_expires_at == clock.now() + LEASE
    assert JobRun.objects.get(pk=lost.pk).lease_owner == "w-other"


def test_a_beat_does_not_look_up_a_run_whose_outcome_was_recorded_while_it_renewed(
    clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With many runs in flight, most of those a beat does not renew are runs that
    finished between its look at what it holds and its statement: the worker has let
    go of them, and a look at each cost more than the renewal."""
    _, (done, kept), beat = two_runs_in_hand(clock)
    renew = claims.renew_held

    def outcome_recorded_meanwhile(*args: Any, **kwargs: Any) -> int:
        JobRun.objects.filter(pk=done.pk).update(
            status=RunStatus.SUCCEEDED, lease_owner="", lease_expires_at=None
        )
        beat.drop(done.pk)
        return renew(*args, **kwargs)

    monkeypatch.setattr(heartbeat, "renew_held", outcome_recorded_meanwhile)
    clock.advance(timedelta(seconds=20))
    with CaptureQueriesContext(connections["default"]) as queries:
        beat.beat()
    looks = [
        query["sql"]
        for query in queries.captured_queries
        if query["sql"].startswith("SELECT") and "FOR UPDATE" not in query["sql"]
    ]
    assert len(looks) == 1  # at the run still in hand, as before
    assert kept.pk.hex in looks[0].replace("-", "")
    assert done.pk.hex not in looks[0].replace("-", "")
