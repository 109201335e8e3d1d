"""Shared fixtures: a fake clock, side-effect counters, and driving runs to their next stop."""

from __future__ import annotations

import random
import threading
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest

from django_durable_jobs.db import dialect
from django_durable_jobs.db.claims import claim, release
from django_durable_jobs.engine.clock import FakeClock, use
from django_durable_jobs.engine.timeouts import TimeGuard
from django_durable_jobs.models import JobRun
from django_durable_jobs.worker.execution import execute
from django_durable_jobs.worker.heartbeat import Heartbeat
from django_durable_jobs.worker.outcome import Executed
from django_durable_jobs.worker.pauses import PauseWatch
from django_durable_jobs.worker.wakeup import Waker, make_waker
from tests.testapp import jobs

#: The folders under tests/, each a tier and the marker its tests get (CONTRIBUTING.md
#: "Tests in tiers"): ``make test`` runs unit and browser once per leg and the tiers that
#: read the database on every database.
TIERS = ("unit", "integration", "processes", "browser")

#: The vendor each database marker names (Django's ``connection.vendor``).
DATABASE_MARKERS = {
    "postgres": ("postgresql", "PostgreSQL"),
    "mariadb": ("mysql", "MariaDB/MySQL"),
    "sqlite": ("sqlite", "SQLite"),
}


#: For tests whose processes bring a SQLite file of their own (DATABASE_URL does not reach
#: them): the same test on every database, so it runs in the SQLite suite only.
own_sqlite_file = pytest.mark.sqlite(
    reason="its processes use a SQLite file of their own, whatever DATABASE_URL says"
)


@pytest.hookimpl(tryfirst=True)  # before -m deselects by the tier markers
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark each test with its folder's tier, and skip, with its reason, a test marked for
    other databases than the one in use."""
    for item in items:
        item.add_marker(_tier_of(item))
        _skip_on_other_databases(item)
        _skip_on_psycopg2(item)
    _skip_full_fault_battery(config, items)


def _tier_of(item: pytest.Item) -> str:
    """The tier is the folder: a test outside one, or on the wrong side of a tier's line
    (a database in unit, a real process outside processes), stops the collection."""
    tests_dir = Path(__file__).parent
    relative = item.path.relative_to(tests_dir).parts
    tier = relative[0] if len(relative) > 1 else ""
    if tier not in TIERS:
        raise pytest.UsageError(f"{item.nodeid}: test files live in tests/<tier>/, {TIERS}")
    if tier == "unit" and item.get_closest_marker("django_db") is not None:
        raise pytest.UsageError(f"{item.nodeid}: a unit test has no database (django_db)")
    if tier != "processes" and item.get_closest_marker("subprocess") is not None:
        raise pytest.UsageError(f"{item.nodeid}: real worker processes live in tests/processes")
    return tier


def _skip_on_other_databases(item: pytest.Item) -> None:
    """``@pytest.mark.postgres(reason="LISTEN/NOTIFY is PostgreSQL's")``: a test runs on
    the databases its markers name (``postgres`` and ``mariadb`` together: a server
    database); the summary says what each database did not cover and why."""
    from django.db import connection

    named = [item.get_closest_marker(name) for name in DATABASE_MARKERS]
    markers = [marker for marker in named if marker is not None]
    vendors = {DATABASE_MARKERS[marker.name][0] for marker in markers}
    if not markers or connection.vendor in vendors:
        return
    labels = " or ".join(DATABASE_MARKERS[marker.name][1] for marker in markers)
    reasons = [marker.kwargs["reason"] for marker in markers if "reason" in marker.kwargs]
    why = reasons[0] if reasons else f"needs {labels}"
    item.add_marker(pytest.mark.skip(reason=f"{why} (this run: {connection.vendor})"))


def _skip_on_psycopg2(item: pytest.Item) -> None:
    """``@pytest.mark.psycopg3(reason="…")``: a test of psycopg 3's own path (prepared
    claims, kept cursors, NOTIFY) is skipped on PostgreSQL through psycopg2
    (``make test``'s ``suite-postgresql-psycopg2``); other databases run it."""
    from django.db import connection

    marker = item.get_closest_marker("psycopg3")
    if marker is None or connection.vendor != "postgresql":
        return
    if not dialect.of(connection.alias).fused:  # the dialect's own test of psycopg 3
        why = marker.kwargs.get("reason", "psycopg 3's path")
        item.add_marker(pytest.mark.skip(reason=f"{why} (this run: psycopg2)"))


@pytest.fixture
def clock() -> Iterator[FakeClock]:
    with use(FakeClock()) as fake:
        yield fake


@pytest.fixture(autouse=True)
def calls() -> Iterator[object]:
    jobs.CALLS.clear()
    jobs.FAIL_ONCE.clear()
    yield jobs.CALLS
    jobs.CALLS.clear()
    jobs.FAIL_ONCE.clear()


@pytest.fixture
def waker() -> Iterator[Waker]:
    """An idle worker's wake-up (``make_waker``), connected: PostgreSQL LISTENs from
    its first wait."""
    made = make_waker()
    made.wait(0.05)
    try:
        yield made
    finally:
        made.close()


@pytest.fixture(autouse=True)
def _heartbeats_stopped() -> Iterator[None]:
    """A test that drives a ``Worker`` one ``run_once`` at a time never reaches the end
    of its loop, which stops the heartbeat thread: stop those left beating, so that
    none holds a connection when the test database is dropped."""
    yield
    for thread in threading.enumerate():
        if isinstance(thread, Heartbeat):
            thread.stop()


class Driver:
    """Claims and executes runnable runs the way the worker will, on a fake clock:
    the runs of a paused queue or job too are left alone (pauses read before each claim)."""

    def __init__(self, clock: FakeClock, owner: str = "test-worker") -> None:
        self.clock = clock
        self.owner = owner
        self.rng = random.Random(7)
        self.pauses = PauseWatch(0.0, owner)

    def step(self, run: JobRun | None = None) -> Executed | None:
        """Claim one runnable run (``run`` if given) and execute it to its next stop."""
        claimed = claim(
            self.owner,
            now=self.clock.now(),
            lease=timedelta(minutes=1),
            limit=50,
            paused=self.pauses.current(),
        )
        wanted = [c for c in claimed if run is None or c.pk == run.pk][:1]
        for other in claimed:  # give back what we do not execute now
            if other not in wanted:
                release(other, self.owner, now=self.clock.now())
        if not wanted:
            return None
        target = wanted[0]
        return execute(
            target,
            clock=self.clock,
            owner=self.owner,
            guard=TimeGuard(use_signals=False),
            rng=self.rng,
        )

    def drain(self, limit: int = 100) -> int:
        """Execute runs until nothing is runnable now; returns how many executions."""
        count = 0
        while count < limit and self.step() is not None:
            count += 1
        return count


@pytest.fixture
def driver(clock: FakeClock) -> Driver:
    return Driver(clock)


def _skip_full_fault_battery(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The full fault battery (``faults``) and the soak (``soak``) run only when asked
    for: ``make faults``, ``make soak``; CI runs the fault slice that is not marked."""
    asked = config.getoption("markexpr") or ""
    for marker, target in (("faults", "make faults"), ("soak", "make soak")):
        if marker in asked:
            continue
        skip = pytest.mark.skip(reason=f"only when asked for: {target} (-m {marker})")
        for item in items:
            if item.get_closest_marker(marker) is not None:
                item.add_marker(skip)
