"""``engine/bell.py``: the wake-up a stop signal's handler rings."""

from __future__ import annotations

import os
import signal
import threading
import time

from django_durable_jobs.engine.bell import TICK, Bell


def test_a_ring_from_a_signal_handler_ends_the_wait_it_interrupted() -> None:
    """The handler runs on the main thread while it waits (holding the event's lock as
    it enters or leaves a wait): ringing there must not wait for that lock, and the
    wait ends within a tick."""
    bell = Bell()
    previous = signal.signal(signal.SIGUSR1, lambda signum, frame: bell.ring())
    try:
        timer = threading.Timer(0.1, os.kill, (os.getpid(), signal.SIGUSR1))
        timer.start()
        started = time.monotonic()
        assert bell.wait(30) is True
        assert time.monotonic() - started < 10  # rung, not timed out
        timer.join()
    finally:
        signal.signal(signal.SIGUSR1, previous)


def test_signals_in_a_burst_never_leave_the_waiter_stuck() -> None:
    """Many rings from a handler while the main thread enters and leaves short waits:
    every one of them ends its wait (an ``Event.set()`` there hung a worker)."""
    bell = Bell()
    rung = threading.Event()
    previous = signal.signal(signal.SIGUSR1, lambda signum, frame: bell.ring())

    def ring_often() -> None:
        while not rung.is_set():
            os.kill(os.getpid(), signal.SIGUSR1)
            time.sleep(0.0005)

    sender = threading.Thread(target=ring_often)
    sender.start()
    try:
        woken = sum(bell.wait(TICK) for _ in range(200))
    finally:
        rung.set()
        sender.join()
        signal.signal(signal.SIGUSR1, previous)
    assert woken > 0


def test_a_ring_from_another_thread_ends_the_wait_at_once_and_a_quiet_wait_times_out() -> None:
    bell = Bell()
    assert bell.wait(0.05) is False
    threading.Timer(0.05, bell.ring).start()
    assert bell.wait(30) is True
    assert bell.wait(0) is False  # the ring was taken
