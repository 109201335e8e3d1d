"""The claim's filter of a rolling deploy (``db/executable.py``): a worker takes runs of
the jobs and versions it registers, leaves those another live worker registers, and
takes those nobody registers only once they have been runnable for the grace. The same
on each path: the ORM's claim, PostgreSQL's prepared statement and flow function."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from django_durable_jobs.db import claims, dialect
from django_durable_jobs.db.executable import Executable
from django_durable_jobs.db.flow import limits as flow
from django_durable_jobs.engine.clock import FakeClock
from django_durable_jobs.models import JobRun, RunStatus
from tests.factories import JobRunFactory

pytestmark = pytest.mark.django_db

LEASE = timedelta(seconds=30)
GRACE = timedelta(minutes=10)


def _runs(now: datetime, **limits: object) -> dict[str, JobRun]:
    """A run of each kind, all due: this worker's, another live worker's, nobody's."""
    made = {
        "mine": JobRunFactory.create(job_name="flow", job_version=1, **limits),
        "theirs": JobRunFactory.create(job_name="flow", job_version=2, **limits),
        "new job": JobRunFactory.create(job_name="added", job_version=1, **limits),
        "nobody's": JobRunFactory.create(job_name="gone", job_version=1, **limits),
    }
    for run in made.values():
        run.wake_at = run.created_at = now - timedelta(minutes=1)
        run.save()
    return made


def _only(now: datetime) -> Executable:
    return Executable(
        mine=frozenset({("flow", 1)}),
        anyone=frozenset({("flow", 1), ("flow", 2), ("added", 1)}),
        overdue=now - GRACE,
    )


def _names(claimed: list[JobRun], made: dict[str, JobRun]) -> set[str]:
    by_pk = {run.pk: name for name, run in made.items()}
    return {by_pk[run.pk] for run in claimed}


@pytest.mark.parametrize("path", ["chosen", "generic ORM"])
def test_a_filtered_claim_takes_its_own_versions_and_leaves_the_others(
    path: str, clock: FakeClock
) -> None:
    now = clock.now()
    made = _runs(now)
    used = dialect.of("default") if path == "chosen" else dialect.Dialect("default")
    with dialect.chosen("default", used):
        claimed = claims.claim("w1", now=now, lease=LEASE, limit=10, only=_only(now))
        assert _names(claimed, made) == {"mine"}
        # Nobody registers "gone": once runnable for the grace, it is taken (to fail).
        later = now + GRACE
        claimed = claims.claim("w1", now=later, lease=LEASE, limit=10, only=_only(later))
        assert _names(claimed, made) == {"nobody's"}
        # Without a filter (no rollout under way), any run.
        claimed = claims.claim("w2", now=later, lease=LEASE, limit=10)
    assert _names(claimed, made) == {"theirs", "new job"}


def test_runs_under_a_concurrency_limit_are_filtered_too(clock: FakeClock) -> None:
    now = clock.now()
    made = _runs(now, concurrency_limit=5, concurrency_key="k")
    claimed, _ = flow.claim_limited("w1", now=now, lease=LEASE, limit=10, only=_only(now))
    assert _names(claimed, made) == {"mine"}
    later = now + GRACE
    claimed, _ = flow.claim_limited("w1", now=later, lease=LEASE, limit=10, only=_only(later))
    assert _names(claimed, made) == {"nobody's"}


def test_runs_under_a_throttle_are_filtered_too(clock: FakeClock) -> None:
    now = clock.now()
    made = _runs(now, throttle_limit=5, throttle_key="k", throttle_period=timedelta(minutes=1))
    claimed, _ = flow.claim_limited("w1", now=now, lease=LEASE, limit=10, only=_only(now))
    assert _names(claimed, made) == {"mine"}


def test_a_run_given_back_is_as_it_was_before_the_claim(clock: FakeClock) -> None:
    now = clock.now()
    queued = JobRunFactory.create(job_name="added", wake_at=now - timedelta(minutes=3))
    sleeping = JobRunFactory.create(
        job_name="added",
        status=RunStatus.SLEEPING,
        attempt=2,
        started_at=now - timedelta(days=1),
        wake_at=now - timedelta(minutes=2),
    )
    claimed = claims.claim("w1", now=now, lease=LEASE, limit=10)
    assert {run.pk for run in claimed} == {queued.pk, sleeping.pk}
    for run in claimed:
        assert claims.give_back(run, "w1")
        assert not claims.give_back(run, "w1")  # once
    queued.refresh_from_db()
    sleeping.refresh_from_db()
    assert (queued.status, queued.attempt, queued.started_at) == (RunStatus.QUEUED, 0, None)
    assert queued.wake_at == now - timedelta(minutes=3)  # how long it waited still counts
    assert (sleeping.status, sleeping.attempt) == (RunStatus.SLEEPING, 2)
    assert sleeping.started_at == now - timedelta(days=1)
    assert sleeping.wake_at == now - timedelta(minutes=2)
    assert queued.lease_owner == sleeping.lease_owner == ""


@pytest.mark.parametrize("name", ['with "quotes"', "back\\slash", "comma, {brace}"])
def test_job_names_any_text_are_filtered_exactly(name: str, clock: FakeClock) -> None:
    now = clock.now()
    run = JobRunFactory.create(job_name=name, job_version=3, wake_at=now)
    JobRunFactory.create(job_name=name, job_version=4, wake_at=now)
    only = Executable(frozenset({(name, 3)}), frozenset({(name, 3), (name, 4)}), now - GRACE)
    claimed = claims.claim("w1", now=now, lease=LEASE, limit=10, only=only)
    assert [c.pk for c in claimed] == [run.pk]
