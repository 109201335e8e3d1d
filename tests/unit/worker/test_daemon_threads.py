"""The async lane's daemon threads (database calls, sync step functions)
(``worker.daemon_threads``): bounded, never waiting for a call that hangs."""

from __future__ import annotations

import threading
import time
from concurrent.futures import wait

import pytest

from django_durable_jobs.worker.daemon_threads import DaemonThreads


class Exits:
    """Counts the threads that ended (``on_exit``)."""

    def __init__(self) -> None:
        self.count = 0
        self._lock = threading.Lock()

    def __call__(self) -> None:
        with self._lock:
            self.count += 1


def test_a_hung_call_takes_one_thread_and_the_others_serve_the_rest(
    caplog: pytest.LogCaptureFixture,
) -> None:
    release = threading.Event()
    exits = Exits()
    pool = DaemonThreads(2, name="test-step", on_exit=exits, stuck="%d call(s) stuck")
    hung = pool.submit(release.wait, 30)
    results = [pool.submit(lambda n=n: n * 2) for n in range(5)]
    wait(results, timeout=30)
    assert [f.result() for f in results] == [0, 2, 4, 6, 8]
    assert not hung.done()
    pool.shutdown(wait=True)  # returns: the idle thread ended, the hung one is left
    assert exits.count == 1
    assert "1 call(s) stuck" in caplog.text
    release.set()
    assert hung.result(timeout=30) is True
    for thread in threading.enumerate():
        if thread.name.startswith("test-step"):
            thread.join(timeout=30)
    assert exits.count == 2


def test_never_more_threads_than_its_size() -> None:
    release = threading.Event()
    pool = DaemonThreads(2, name="test-size", on_exit=lambda: None, stuck="%d stuck")
    calls = [pool.submit(release.wait, 30) for _ in range(3)]
    try:
        assert not calls[2].running()  # both threads are inside a call
        assert len([t for t in threading.enumerate() if t.name.startswith("test-size")]) == 2
        assert all(t.daemon for t in threading.enumerate() if t.name.startswith("test-size"))
    finally:
        release.set()
    assert [f.result(timeout=30) for f in calls] == [True, True, True]
    pool.shutdown(wait=True)


def test_a_call_that_raises_hands_its_exception_to_the_caller() -> None:
    class Stop(BaseException):
        pass

    def stops() -> None:
        raise Stop()

    pool = DaemonThreads(1, name="test-raise", on_exit=lambda: None, stuck="%d stuck")
    with pytest.raises(Stop):
        pool.submit(stops).result(timeout=30)
    assert pool.submit(lambda: "still serving").result(timeout=30) == "still serving"
    pool.shutdown(wait=True)
    with pytest.raises(RuntimeError, match="after shutdown"):
        pool.submit(lambda: None)


def test_its_size_is_at_least_one() -> None:
    with pytest.raises(ValueError, match="at least one thread"):
        DaemonThreads(0, name="test-none", on_exit=lambda: None, stuck="%d stuck")


def test_shutdown_can_cancel_the_calls_not_started() -> None:
    release = threading.Event()
    pool = DaemonThreads(1, name="test-cancel", on_exit=lambda: None, stuck="%d stuck")
    running = pool.submit(release.wait, 30)
    queued = pool.submit(lambda: "never")
    try:
        deadline = time.monotonic() + 30
        while not running.running() and time.monotonic() < deadline:
            time.sleep(0.001)  # the thread has taken the first call off the queue
        pool.shutdown(wait=False, cancel_futures=True)
        assert queued.cancelled()
    finally:
        release.set()
    assert running.result(timeout=30) is True


def test_shutdown_gives_the_calls_still_running_its_patience(
    caplog: pytest.LogCaptureFixture,
) -> None:
    exits = Exits()
    pool = DaemonThreads(
        1, name="test-patience", on_exit=exits, stuck="%d call(s) stuck", patience=30
    )
    slow = pool.submit(time.sleep, 0.3)
    deadline = time.monotonic() + 30
    while not slow.running() and time.monotonic() < deadline:
        time.sleep(0.001)
    pool.shutdown(wait=True)  # returns once the call did and its thread closed
    assert slow.done() and exits.count == 1
    assert "stuck" not in caplog.text


def test_shutdown_can_give_less_patience_than_the_pools(caplog: pytest.LogCaptureFixture) -> None:
    """The lane's close after its runs' releases timed out: the call that held them has
    had its time."""
    exits = Exits()
    pool = DaemonThreads(
        1, name="test-no-patience", on_exit=exits, stuck="%d call(s) stuck", patience=30
    )
    release = threading.Event()
    hung = pool.submit(release.wait, 30)
    deadline = time.monotonic() + 30
    while not hung.running() and time.monotonic() < deadline:
        time.sleep(0.001)
    started = time.monotonic()
    pool.shutdown(wait=True, patience=0)
    waited = time.monotonic() - started
    assert not hung.done() and exits.count == 0
    assert "1 call(s) stuck" in caplog.text
    assert waited < 30  # not the pool's patience
    release.set()
    assert hung.result(timeout=30) is True
