"""Shared fixtures: a fake clock, side-effect counters, and driving runs to their next stop."""

from __future__ import annotations

import random
from collections.abc import Iterator
from datetime import timedelta

import pytest

from django_durable_jobs.db.claims import claim, release
from django_durable_jobs.engine.clock import FakeClock, use
from django_durable_jobs.engine.timeouts import TimeGuard
from django_durable_jobs.models import JobRun
from django_durable_jobs.worker.execution import execute
from django_durable_jobs.worker.outcome import Executed
from tests.testapp import jobs

#: The vendor each database marker needs (Django's ``connection.vendor``).
DATABASE_MARKERS = {"postgres": ("postgresql", "PostgreSQL"), "mariadb": ("mysql", "MariaDB/MySQL")}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Skip, with its reason, a test marked for another database than the one in use.

    ``@pytest.mark.postgres(reason="LISTEN/NOTIFY is PostgreSQL's")``: the whole suite
    runs on every database, and the summary says what each one did not cover and why.
    """
    from django.db import connection

    for item in items:
        for marker_name, (vendor, label) in DATABASE_MARKERS.items():
            marker = item.get_closest_marker(marker_name)
            if marker is None or connection.vendor == vendor:
                continue
            why = marker.kwargs.get("reason", f"needs {label}")
            item.add_marker(pytest.mark.skip(reason=f"{why} (this run: {connection.vendor})"))
    _skip_full_fault_battery(config, items)


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


class Driver:
    """Claims and executes runnable runs the way the worker will, on a fake clock."""

    def __init__(self, clock: FakeClock, owner: str = "test-worker") -> None:
        self.clock = clock
        self.owner = owner
        self.rng = random.Random(7)

    def step(self, run: JobRun | None = None) -> Executed | None:
        """Claim one runnable run (``run`` if given) and execute it to its next stop."""
        claimed = claim(self.owner, now=self.clock.now(), lease=timedelta(minutes=1), limit=50)
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
