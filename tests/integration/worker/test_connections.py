"""A worker on Django's connection pool (``OPTIONS={"pool": ...}``, PostgreSQL): every
thread of a worker holds one of the pool's connections for as long as it lives, so
the async lane gets the threads the pool has room for (``connections.fit_to_pool``). The
forked children's own pools: tests/processes/worker/test_lane.py."""

from __future__ import annotations

import logging

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.db import connection

from django_durable_jobs.worker import connections

POOLED = bool(connection.settings_dict["OPTIONS"].get("pool"))


def test_the_pools_size_is_read_from_djangos_pool_and_none_without_one() -> None:
    if POOLED:  # suite-postgresql-options: Django's default pool, 4 connections
        assert connections.pool_size("default") == 4
    else:
        assert connections.pool_size("default") is None


@pytest.mark.parametrize("most", [None, 7, 9])
def test_a_pool_with_room_for_every_thread_or_no_pool_changes_nothing(
    most: int | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(connections, "pool_size", lambda alias: most)
    assert connections.fit_to_pool("default", 4) == 4
    assert connections.fit_to_pool("default", 0) == 0


def _fit(
    most: int, asked: int, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> tuple[int, list[str]]:
    """The lane threads ``fit_to_pool`` gives of ``asked`` with a pool of ``most``, and
    the warnings logged in the test so far."""
    monkeypatch.setattr(connections, "pool_size", lambda alias: most)
    with caplog.at_level(logging.WARNING, logger="django_durable_jobs.worker"):
        threads = connections.fit_to_pool("default", asked)
    return threads, caplog.messages


def test_a_small_pool_gives_the_lane_what_is_left_and_says_so(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # Of the 4: the main thread, the heartbeat, and Django's async ORM thread.
    assert _fit(4, 4, monkeypatch, caplog) == (
        1,
        [
            "the database pool holds at most 4 connections: the async lane gets 1 of the 4 "
            "ASYNC_CONNECTIONS (set the pool's max_size to 7 for all of them)",
            "the database pool holds at most 4 connections and the worker keeps 4: 0 left "
            "for the sync step functions of async jobs (up to 1 at a time), and one that uses "
            "the ORM waits for a free connection up to the pool's timeout (set the pool's "
            "max_size to 11 for them too)",
        ],
    )


@pytest.mark.parametrize(("most", "spare"), [(7, 0), (9, 2)])
def test_a_pool_with_room_for_the_lane_but_not_its_step_functions_says_so(
    most: int, spare: int, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """An async job's sync step function that uses the ORM takes a connection of the
    pool while it runs: with the worker's own holding the rest, it waited 30 s."""
    assert _fit(most, 4, monkeypatch, caplog) == (
        4,
        [
            f"the database pool holds at most {most} connections and the worker keeps 7: "
            f"{spare} left for the sync step functions of async jobs (up to 4 at a time), and "
            "one that uses the ORM waits for a free connection up to the pool's timeout (set "
            "the pool's max_size to 11 for them too)"
        ],
    )


def test_a_pool_with_room_for_every_thread_and_step_function_says_nothing(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    assert _fit(11, 4, monkeypatch, caplog) == (4, [])
    assert _fit(11, 0, monkeypatch, caplog) == (0, [])


@pytest.mark.parametrize(("most", "threads", "full"), [(2, 4, 7), (3, 4, 7), (1, 0, 2)])
def test_a_pool_too_small_for_the_workers_own_connections_is_refused(
    most: int, threads: int, full: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The heartbeat would wait for the main thread's connection (30 s, then fail) and
    the leases expire under a healthy worker: refused before the worker starts."""
    monkeypatch.setattr(connections, "pool_size", lambda alias: most)
    with pytest.raises(ImproperlyConfigured, match=rf"holds at most {most} connection") as error:
        connections.fit_to_pool("default", threads)
    # The size fit_to_pool asks for too: main, heartbeat, async ORM thread, the lane's.
    assert f"set 'max_size' to {full} or more" in str(error.value)
    # A pool of 3 with async jobs: a lane thread would find none free, and wait 30 s
    # for one on every write (the async ORM thread keeps the third).
    needs = "needs 4 (its main thread, its heartbeat, Django's async ORM thread, one for"
    assert (needs in str(error.value)) == bool(threads)


def test_a_pool_of_two_serves_a_worker_without_async_jobs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(connections, "pool_size", lambda alias: 2)
    assert connections.fit_to_pool("default", 0) == 0


def test_runjobs_with_several_processes_refuses_a_small_pool_before_it_forks(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each child would be refused at its start and replaced, for ever: the supervisor
    asks first (the test app has async jobs: 3 + 1 connections at least)."""
    from django_durable_jobs.worker.loop import WorkerOptions
    from django_durable_jobs.worker.supervisor import run_workers

    forks: list[int] = []

    def fork() -> int:  # the parent's side of a fork, counted
        forks.append(1)
        return 1

    monkeypatch.setattr(connections, "pool_size", lambda alias: 2)
    monkeypatch.setattr("os.fork", fork)
    with pytest.raises(ImproperlyConfigured, match="set 'max_size' to 7 or more"):
        run_workers(WorkerOptions(concurrency=2, burst=True))
    assert forks == []
