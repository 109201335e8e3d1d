"""The worker's garbage collector (``worker.collector``): start-up's objects frozen, the
young generations collected less often while the worker runs, a project's own choice
kept."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from django_durable_jobs.worker import collector


@pytest.fixture(autouse=True)
def _collector_restored() -> Iterator[None]:
    """The test process's thresholds as they were, and its collector on (what a test
    froze stays frozen: ``gc.unfreeze`` would thaw the interpreter's own too)."""
    threshold, enabled = gc.get_threshold(), gc.isenabled()
    yield
    gc.set_threshold(*threshold)
    (gc.enable if enabled else gc.disable)()


def test_start_ups_objects_are_frozen_and_the_young_collected_less_often() -> None:
    gc.set_threshold(700, 10, 10)  # Python's defaults
    alive = [{"a long-lived": "object"}]
    frozen = gc.get_freeze_count()  # not 0 on Python 3.12: the interpreter's own
    with collector.tuned():
        assert gc.get_freeze_count() > frozen
        assert all(tracked is not alive for tracked in gc.get_objects())  # not walked
        assert gc.get_threshold() == (collector.YOUNG, collector.MIDDLE, 10)
    assert gc.get_threshold() == (700, 10, 10)


def test_higher_thresholds_a_project_set_are_kept() -> None:
    gc.set_threshold(200_000, 50, 5)
    with collector.tuned():
        assert gc.get_threshold() == (200_000, 50, 5)
    assert gc.get_threshold() == (200_000, 50, 5)


def test_a_disabled_collector_is_left_alone() -> None:
    gc.set_threshold(700, 10, 10)
    gc.disable()
    frozen = gc.get_freeze_count()
    with collector.tuned():
        assert not gc.isenabled()
        assert gc.get_freeze_count() == frozen
        assert gc.get_threshold() == (700, 10, 10)
