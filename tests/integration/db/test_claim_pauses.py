"""The claim's filter while queues or jobs are paused (``db/paused.py``): runs of a paused
queue or job are not taken, the others are. The same on each path: the ORM's claim,
PostgreSQL's prepared statement and flow function, and the flow claim by key."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from django_durable_jobs.db import claims, dialect
from django_durable_jobs.db.flow import limits as flow
from django_durable_jobs.db.paused import Paused
from django_durable_jobs.engine.clock import FakeClock
from django_durable_jobs.models import JobRun, RunStatus
from tests.factories import JobRunFactory

pytestmark = pytest.mark.django_db

LEASE = timedelta(seconds=30)
PAUSED = Paused(queues=frozenset({"mail", 'odd "queue"'}), jobs=frozenset({"tests.add"}))


def _runs(now: datetime, **limits: object) -> dict[str, JobRun]:
    """A due run of a paused queue, of a paused job, and of neither."""
    made = {
        "paused queue": JobRunFactory.create(job_name="tests.noop", queue="mail", **limits),
        "quoted queue": JobRunFactory.create(job_name="tests.noop", queue='odd "queue"', **limits),
        "paused job": JobRunFactory.create(job_name="tests.add", queue="default", **limits),
        "free": JobRunFactory.create(job_name="tests.noop", queue="default", **limits),
    }
    for run in made.values():
        run.wake_at = run.created_at = now - timedelta(minutes=1)
        run.save()
    return made


def _names(claimed: list[JobRun], made: dict[str, JobRun]) -> set[str]:
    by_pk = {run.pk: name for name, run in made.items()}
    return {by_pk[run.pk] for run in claimed}


@pytest.mark.parametrize("path", ["chosen", "generic ORM"])
@pytest.mark.parametrize(
    ("queues", "after_resume"),
    [
        (None, {"paused queue", "quoted queue", "paused job"}),
        (["default", "mail"], {"paused queue", "paused job"}),
        (["mail"], {"paused queue"}),
    ],
)
def test_a_claim_refuses_runs_of_a_paused_queue_or_job_until_resumed(
    path: str, queues: list[str] | None, after_resume: set[str], clock: FakeClock
) -> None:
    now = clock.now()
    made = _runs(now)
    used = dialect.of("default") if path == "chosen" else dialect.Dialect("default")
    with dialect.chosen("default", used):
        claimed = claims.claim("w1", now=now, lease=LEASE, limit=10, queues=queues, paused=PAUSED)
        assert _names(claimed, made) == (
            {"free"} if "default" in (queues or ["default"]) else set()
        )
        assert JobRun.objects.get(pk=made["paused job"].pk).status == RunStatus.QUEUED
        # Resumed: the claim has no filter, and takes what was left.
        claimed = claims.claim("w2", now=now, lease=LEASE, limit=10, queues=queues)
    assert _names(claimed, made) == after_resume


def test_nothing_paused_is_the_usual_claim(clock: FakeClock) -> None:
    now = clock.now()
    made = _runs(now)
    claimed = claims.claim("w1", now=now, lease=LEASE, limit=10, paused=Paused())
    assert _names(claimed, made) == set(made)


@pytest.mark.parametrize("limit", ["concurrency", "throttle"])
def test_runs_under_a_limit_are_refused_too(limit: str, clock: FakeClock) -> None:
    now = clock.now()
    if limit == "concurrency":
        made = _runs(now, concurrency_limit=5, concurrency_key="k")
    else:
        made = _runs(now, throttle_limit=5, throttle_key="k", throttle_period=timedelta(hours=1))
    claimed, _ = flow.claim_limited("w1", now=now, lease=LEASE, limit=10, paused=PAUSED)
    assert _names(claimed, made) == {"free"}
    claimed, _ = flow.claim_limited("w2", now=now, lease=LEASE, limit=10)
    assert _names(claimed, made) == {"paused queue", "quoted queue", "paused job"}


def test_sleeping_and_waiting_runs_stay_parked_once_due(clock: FakeClock) -> None:
    now = clock.now()
    made = {
        status: JobRunFactory.create(
            job_name="tests.add", status=status, wake_at=now - timedelta(hours=1)
        )
        for status in (RunStatus.SLEEPING, RunStatus.WAITING)
    }
    assert claims.claim("w1", now=now, lease=LEASE, limit=10, paused=PAUSED) == []
    assert {r.status for r in JobRun.objects.all()} == {RunStatus.SLEEPING, RunStatus.WAITING}
    claimed = claims.claim("w1", now=now, lease=LEASE, limit=10)
    assert {run.claimed_from for run in claimed} == set(made)
