"""The worker's garbage collector (``worker.collector``): start-up's objects frozen, the
young generations collected less often, a project's own choice kept."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from django_durable_jobs.worker import collector


@pytest.fixture(autouse=True)
def _collector_restored() -> Iterator[None]:
    """The test process's collector as it was (``tune`` changes the process's)."""
    threshold, enabled = gc.get_threshold(), gc.isenabled()
    yield
    gc.unfreeze()
    gc.set_threshold(*threshold)
    (gc.enable if enabled else gc.disable)()


def test_tune_freezes_what_is_alive_and_collects_the_young_less_often() -> None:
    gc.set_threshold(700, 10, 10)  # Python's defaults
    alive = [{"a long-lived": "object"}]
    collector.tune()
    assert gc.get_freeze_count() > 0
    assert all(tracked is not alive for tracked in gc.get_objects())  # frozen: not walked
    assert gc.get_threshold() == (collector.YOUNG, collector.MIDDLE, 10)


def test_tune_keeps_higher_thresholds_a_project_set() -> None:
    gc.set_threshold(200_000, 50, 5)
    collector.tune()
    assert gc.get_threshold() == (200_000, 50, 5)


def test_tune_leaves_a_disabled_collector_alone() -> None:
    gc.set_threshold(700, 10, 10)
    gc.disable()
    collector.tune()
    assert not gc.isenabled()
    assert gc.get_freeze_count() == 0
    assert gc.get_threshold() == (700, 10, 10)
