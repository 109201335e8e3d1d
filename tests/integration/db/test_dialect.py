"""One dialect per database alias, chosen once from the vendor and the driver; the
ORM's claim (every database's fallback) and the chosen dialect's claim take the same
runs, in the same order, with the same bookkeeping."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection

from django_durable_jobs.db import dialect
from django_durable_jobs.engine.clock import FakeClock
from django_durable_jobs.models import JobRun, RunStatus
from tests.factories import JobRunFactory

pytestmark = pytest.mark.django_db

EXPECTED: dict[str, type[dialect.Dialect]] = {"sqlite": dialect.SQLite, "mysql": dialect.MySQL}


def test_the_dialect_is_chosen_once_from_the_vendor_and_driver() -> None:
    chosen = dialect.of("default")
    wanted: type[dialect.Dialect]
    if connection.vendor == "postgresql":
        psycopg3 = connection.Database.__name__ == "psycopg"  # type: ignore[attr-defined]
        wanted = dialect.Psycopg if psycopg3 else dialect.Postgres
    else:
        wanted = EXPECTED[connection.vendor]
    assert type(chosen) is wanted
    assert dialect.of("default") is chosen
    assert chosen.fused == chosen.listens == (wanted is dialect.Psycopg)


@pytest.mark.parametrize("kind", ["chosen", "generic ORM"])
def test_every_dialect_claims_the_best_runs_and_remembers_where_they_came_from(
    kind: str, clock: FakeClock
) -> None:
    now = clock.now()
    low = JobRunFactory.create(priority=0, wake_at=now - timedelta(seconds=3))
    high = JobRunFactory.create(priority=5, wake_at=now - timedelta(seconds=1))
    woken = JobRunFactory.create(
        priority=1, status=RunStatus.SLEEPING, started_at=now, attempt=1, wake_at=now
    )
    JobRunFactory.create(priority=9, wake_at=now + timedelta(hours=1))  # not due
    JobRunFactory.create(priority=9, status=RunStatus.RUNNING, wake_at=now)  # held
    generic = dialect.Dialect("default")
    used = dialect.of("default") if kind == "chosen" else generic
    with dialect.chosen("default", used):
        first = dialect.of("default").claim("w1", now, timedelta(seconds=30), None, 2)
        rest = dialect.of("default").claim("w2", now, timedelta(seconds=30), None, 5)
    assert [run.pk for run in first] == [high.pk, woken.pk]
    assert [run.pk for run in rest] == [low.pk]
    assert [(run.claimed_from, run.claimed_fresh) for run in [*first, *rest]] == [
        (RunStatus.QUEUED, True),
        (RunStatus.SLEEPING, False),
        (RunStatus.QUEUED, True),
    ]
    rows = {run.pk: run for run in JobRun.objects.filter(pk__in=[high.pk, woken.pk, low.pk])}
    assert rows[high.pk].lease_owner == rows[woken.pk].lease_owner == "w1"
    assert rows[low.pk].lease_owner == "w2"
    assert (rows[high.pk].attempt, rows[woken.pk].attempt) == (1, 1)  # a resume keeps its own


@pytest.mark.parametrize("kind", ["chosen", "generic ORM"])
@pytest.mark.parametrize("queues", [["busy"], None, ["busy", "spare"]], ids=["one", "all", "many"])
def test_a_claim_takes_due_runs_above_at_and_below_the_default_priority_in_order(
    kind: str, queues: list[str] | None, clock: FakeClock
) -> None:
    """The claims read a priority range at a time (above the default, at it, below
    it): the best due runs still come first across the ranges, a claim that wants more
    goes on to the next range, and no parked run of any range is taken."""
    now = clock.now()
    due: list[JobRun] = []
    for priority in (4, 1, 0, -1, -3):
        for ago in (2, 5):  # the older first within a priority
            due.append(
                JobRunFactory.create(
                    queue="busy", priority=priority, wake_at=now - timedelta(seconds=ago)
                )
            )
        JobRunFactory.create(  # parked after its priority's due runs
            queue="busy",
            priority=priority,
            status=RunStatus.SLEEPING,
            started_at=now,
            attempt=1,
            wake_at=now + timedelta(hours=1),
        )
    if queues is not None:
        JobRunFactory.create(queue="other", priority=9, wake_at=now - timedelta(seconds=9))
    best = sorted(due, key=lambda run: (-run.priority, run.wake_at))
    used = dialect.of("default") if kind == "chosen" else dialect.Dialect("default")
    lease = timedelta(seconds=30)
    with dialect.chosen("default", used):
        first = dialect.of("default").claim("w1", now, lease, queues, 3)
        second = dialect.of("default").claim("w2", now, lease, queues, 4)
        rest = dialect.of("default").claim("w3", now, lease, queues, 20)
    assert [run.pk for run in first] == [run.pk for run in best[:3]]
    assert [run.pk for run in second] == [run.pk for run in best[3:7]]
    assert [run.pk for run in rest] == [run.pk for run in best[7:]]
