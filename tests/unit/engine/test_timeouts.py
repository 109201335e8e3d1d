"""``TimeGuard``: wall-time limits that interrupt loops and blocking calls.

These tests use small real durations (a limit of 0.2 s) because the thing under test
is the real ``SIGALRM`` timer. They never assert on elapsed time: each one proves
*which* error interrupted *which* block. Loops that should be interrupted give up on
their own after ``FAILSAFE`` seconds, so a broken guard fails a test instead of
hanging the suite.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from django_durable_jobs.engine.timeouts import TimeGuard

pytestmark = pytest.mark.skipif(not hasattr(signal, "SIGALRM"), reason="needs SIGALRM")

FAILSAFE = 10.0  # seconds; only reached when the guard is broken
SHORT = 0.2


class Expired(Exception):
    """Raised by a limit; ``label`` says which one."""

    def __init__(self, label: str) -> None:
        super().__init__(label)
        self.label = label


def expired(label: str) -> Callable[[], Expired]:
    return lambda: Expired(label)


def spin() -> None:
    """A pure-Python busy loop that only a limit can stop (or the failsafe)."""
    give_up = time.monotonic() + FAILSAFE
    while time.monotonic() < give_up:
        pass


def alarm_armed() -> bool:
    return signal.getitimer(signal.ITIMER_REAL) != (0.0, 0.0)


@pytest.fixture(autouse=True)
def _restore_alarm() -> Iterator[None]:
    """Leave no timer and no handler of ours behind, whatever a test did."""
    previous = signal.getsignal(signal.SIGALRM)
    yield
    signal.setitimer(signal.ITIMER_REAL, 0)
    signal.signal(signal.SIGALRM, previous)


@pytest.fixture
def guard() -> TimeGuard:
    guard = TimeGuard()
    assert guard.use_signals  # pytest runs tests in the main thread
    return guard


# -- interrupting ----------------------------------------------------------------------


def test_endless_python_loop_is_interrupted(guard: TimeGuard) -> None:
    with pytest.raises(Expired) as excinfo, guard.limit(SHORT, expired("loop")):
        spin()
    assert excinfo.value.label == "loop"
    assert not alarm_armed()


def test_blocking_sleep_is_interrupted(guard: TimeGuard) -> None:
    reached: list[str] = []

    def sleep_long() -> None:
        with guard.limit(SHORT, expired("sleep")):
            time.sleep(30)
            reached.append("after sleep")

    with pytest.raises(Expired, match="sleep"):
        sleep_long()
    assert reached == []
    assert not alarm_armed()


def test_error_factory_is_called_once_and_its_error_raised(guard: TimeGuard) -> None:
    made: list[Expired] = []

    def make() -> Expired:
        made.append(Expired("made"))
        return made[-1]

    with pytest.raises(Expired) as excinfo, guard.limit(SHORT, make):
        spin()
    assert made == [excinfo.value]


def test_any_base_exception_can_be_the_error(guard: TimeGuard) -> None:
    class Stop(BaseException):
        pass

    with pytest.raises(Stop), guard.limit(SHORT, Stop):
        spin()


# -- nesting ---------------------------------------------------------------------------


def test_inner_shorter_limit_fires_with_its_own_error(guard: TimeGuard) -> None:
    outer_survived = False
    with guard.limit(FAILSAFE * 2, expired("outer")):
        with pytest.raises(Expired) as excinfo, guard.limit(SHORT, expired("inner")):
            spin()
        assert excinfo.value.label == "inner"
        assert alarm_armed()  # the outer limit is still watching
        outer_survived = True
    assert outer_survived
    assert not alarm_armed()


def test_outer_shorter_limit_fires_inside_an_inner_block(guard: TimeGuard) -> None:
    # A run's timeout expiring inside a step's own limit: the run's error comes out.
    with (
        pytest.raises(Expired) as excinfo,
        guard.limit(SHORT, expired("outer")),
        guard.limit(FAILSAFE * 2, expired("inner")),
    ):
        spin()
    assert excinfo.value.label == "outer"
    assert not alarm_armed()


def test_outer_limit_still_fires_after_the_inner_one_fired(guard: TimeGuard) -> None:
    def run() -> None:
        with guard.limit(SHORT * 2, expired("outer")):
            with pytest.raises(Expired, match="inner"), guard.limit(SHORT, expired("inner")):
                spin()
            spin()

    with pytest.raises(Expired) as excinfo:
        run()
    assert excinfo.value.label == "outer"


# -- shielding -------------------------------------------------------------------------


def test_shield_defers_an_expired_limit_to_right_after_the_block(guard: TimeGuard) -> None:
    reached: list[str] = []

    def run() -> None:
        with guard.limit(SHORT, expired("run")):
            with guard.shield():
                reached.append("shield" if not alarm_armed() else "shield, armed")
                time.sleep(SHORT * 2)  # past the deadline: an alarm would interrupt this
                reached.append("shield done")
            # The limit fires as the shield ends (at the latest, in this loop).
            spin()

    with pytest.raises(Expired, match="run"):
        run()
    assert reached == ["shield", "shield done"]
    assert not alarm_armed()


def test_nested_shields_hold_until_the_outermost_ends(guard: TimeGuard) -> None:
    reached: list[str] = []

    def run() -> None:
        with guard.limit(SHORT, expired("run")):
            with guard.shield():
                with guard.shield():
                    time.sleep(SHORT)
                    reached.append("inner shield done")
                time.sleep(SHORT)  # still shielded: the outer shield holds
                reached.append("outer shield done")
            spin()

    with pytest.raises(Expired):
        run()
    assert reached == ["inner shield done", "outer shield done"]


def test_shield_with_time_left_lets_the_limit_fire_later(guard: TimeGuard) -> None:
    reached: list[str] = []

    def run() -> None:
        with guard.limit(SHORT, expired("run")):
            with guard.shield():
                pass
            reached.append("armed" if alarm_armed() else "disarmed")
            spin()

    with pytest.raises(Expired, match="run"):
        run()
    assert reached == ["armed"]


def test_limit_still_fires_after_a_shield_left_by_an_exception(guard: TimeGuard) -> None:
    # A failed write inside the shield, caught by the job: the run's limit must still
    # hold for the code that follows.
    reached: list[str] = []

    def run() -> None:
        with guard.limit(SHORT, expired("run")):
            try:
                with guard.shield():
                    raise RuntimeError("the write failed")
            except RuntimeError:
                reached.append("caught")
            spin()

    with pytest.raises(Expired, match="run"):
        run()
    assert reached == ["caught"]
    assert not alarm_armed()


def test_shield_without_limits_arms_nothing(guard: TimeGuard) -> None:
    with guard.shield():
        assert not alarm_armed()
    assert not alarm_armed()


# -- no limit, no leftovers ------------------------------------------------------------


def test_no_limit_does_nothing(guard: TimeGuard) -> None:
    made: list[str] = []

    def make() -> Expired:
        made.append("called")
        return Expired("none")

    before = signal.getsignal(signal.SIGALRM)
    with guard.limit(None, make):
        assert not alarm_armed()
        time.sleep(SHORT / 4)
        finished = True
    assert finished
    assert made == []
    assert signal.getsignal(signal.SIGALRM) is before  # no handler installed either


def test_no_alarm_remains_after_a_normal_exit(guard: TimeGuard) -> None:
    with guard.limit(FAILSAFE, expired("run")):
        assert alarm_armed()
        with guard.limit(FAILSAFE / 2, expired("step")):
            assert alarm_armed()
        assert alarm_armed()
    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)


def test_no_alarm_remains_after_the_block_raised(guard: TimeGuard) -> None:
    with pytest.raises(KeyError), guard.limit(FAILSAFE, expired("run")):
        raise KeyError("boom")
    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)


def test_a_limit_that_ended_never_fires_later(guard: TimeGuard) -> None:
    with guard.limit(SHORT, expired("done")):
        pass
    time.sleep(SHORT * 2)  # would be interrupted by a left-over alarm


# -- without signals -------------------------------------------------------------------


def test_without_signals_an_overrun_raises_after_the_block() -> None:
    guard = TimeGuard(use_signals=False)
    reached: list[str] = []

    def run() -> None:
        with guard.limit(SHORT / 4, expired("late")):
            reached.append("armed" if alarm_armed() else "no alarm")
            time.sleep(SHORT)  # not interrupted: there is no alarm
            reached.append("finished")

    with pytest.raises(Expired, match="late"):
        run()
    assert reached == ["no alarm", "finished"]
    assert not alarm_armed()


def test_without_signals_a_block_in_time_does_not_raise() -> None:
    guard = TimeGuard(use_signals=False)
    with guard.limit(FAILSAFE, expired("late")):
        result = "done"
    assert result == "done"


def test_without_signals_the_blocks_own_error_wins() -> None:
    guard = TimeGuard(use_signals=False)

    def run() -> None:
        with guard.limit(SHORT / 4, expired("late")):
            time.sleep(SHORT)
            raise KeyError("own")

    with pytest.raises(KeyError):
        run()


def test_off_the_main_thread_signals_are_not_used() -> None:
    seen: list[bool] = []
    thread = threading.Thread(target=lambda: seen.append(TimeGuard().use_signals))
    thread.start()
    thread.join()
    assert seen == [False]


def test_code_that_swallows_the_error_is_stopped_with_overrun(guard: TimeGuard) -> None:
    from django_durable_jobs.engine.timeouts import Overrun

    caught: list[BaseException] = []

    def stubborn() -> None:
        with guard.limit(SHORT, expired("slow")):
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:  # a broad except keeps the loop going
                try:
                    time.sleep(10)
                except Exception as exc:
                    caught.append(exc)

    with pytest.raises(Overrun) as info:
        stubborn()
    assert [type(exc) for exc in caught] == [Expired]  # the first firing was catchable
    assert isinstance(info.value.error, Expired) and info.value.error.label == "slow"
    assert not alarm_armed()


def test_an_interrupt_inside_a_shield_waits_for_the_write_to_finish() -> None:
    guard = TimeGuard(use_signals=False)
    written = []

    class Stop(BaseException):
        pass

    def write() -> None:
        with guard.shield():
            guard.interrupt(Stop())  # e.g. a second stop signal while a step is persisted
            written.append("the whole write")

    with pytest.raises(Stop):
        write()
    assert written == ["the whole write"]
    with pytest.raises(Stop):
        guard.interrupt(Stop())  # outside a shield: at once
    with guard.shield():  # nothing left over
        pass


def test_the_alarm_handler_is_installed_once_and_no_timer_is_cleared_twice(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A step arms and clears the timer around its write (``shield``); a guard with no
    limit, or a timer already cleared, makes no system call for it. Counted on the
    real calls (they still run)."""
    calls: list[str] = []
    real_setitimer, real_signal = signal.setitimer, signal.signal

    def setitimer(which: int, seconds: float, interval: float = 0.0) -> tuple[float, float]:
        calls.append("setitimer 0" if seconds == 0 else "setitimer")
        return real_setitimer(which, seconds, interval)

    def install(signum: int, handler: Any) -> Any:
        calls.append("signal")
        return real_signal(signum, handler)

    previous = signal.getsignal(signal.SIGALRM)
    monkeypatch.setattr(signal, "setitimer", setitimer)
    monkeypatch.setattr(signal, "signal", install)
    try:
        guard = TimeGuard()
        with guard.shield():  # no limit: nothing to arm or clear
            pass
        assert calls == []
        with guard.limit(10, expired("run")):
            for _ in range(3):  # three steps, each with a write
                with guard.shield():
                    pass
        assert calls == ["signal", "setitimer", *["setitimer 0", "setitimer"] * 3, "setitimer 0"]
        with guard.shield():  # the timer is cleared already
            pass
        assert calls[-1] == "setitimer 0" and len(calls) == 9
    finally:
        real_signal(signal.SIGALRM, previous)
