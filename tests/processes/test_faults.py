"""The fault-injection matrix: every named fault point (db/faults.py) x {kill,
database error, pause past the lease} x {first, middle, last hit}, each in a real
``runjobs`` process, with a second worker that takes over.

What every case asserts: the run finishes with its real outcome (succeeded, its real
result; never X_ATTEMPTS_EXHAUSTED from a phantom owner), nothing is stuck, every step
is recorded once and completed, each event published from a step exists exactly once,
and each side effect happened exactly once except
where the fault sits between a step's effect and its record (``step.before_record``,
and a heartbeat that kills or stops the process inside a step): there, exactly that
one step's effect happened twice.

The points a run of an ``async def`` job passes (``ASYNC_POINTS``) are injected for
``atrio`` too, the same job executed by the worker's async lane. The points inside an
atomic step (``ATOMIC_POINTS``) are injected for ``atomic_trio`` and ``aatomic_trio``:
there every effect happens exactly once, whatever the fault, even a kill inside the
step.

The whole matrix runs under ``make faults`` (marker ``faults``); CI runs ``CI_SLICE``:
the middle hit of every point, with every action at least three times, and
``ASYNC_CI_SLICE``.
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from django.db import connection

from django_durable_jobs.db import faults
from django_durable_jobs.models import Event, JobRun, Message, RunStatus, StepRecord, StepStatus
from django_durable_jobs.verbs.events import publish_event
from django_durable_jobs.verbs.messages import send
from tests.processes.lifeline import die_with_test
from tests.processes.worker.test_worker import (  # noqa: F401 - `workers` is a fixture
    Worker,
    Workers,
    effects,
    status_of,
    wait_until,
    workers,
)
from tests.testapp import fault_jobs

pytestmark = [pytest.mark.subprocess, pytest.mark.django_db(transaction=True)]

#: The nth hit of a point that is its first, middle and last in one run of the job
#: (trio: 4 claims and 4 outcomes, 3 steps, 3 sleeps; relay: 3 invokes, 3 waits; fan: 3
#: fan-outs).
POSITIONS = {
    "claim.after": (1, 2, 4),
    "step.before_record": (1, 2, 3),
    "step.recorded": (1, 2, 3),
    "suspend.write": (1, 2, 3),
    "event.matched": (1, 2, 3),
    "outcome.before": (1, 2, 4),
    "outcome.after": (1, 2, 4),
    "heartbeat": (1, 2, 3),
    "invoke.start": (1, 2, 3),
    "fanout.start": (1, 2, 3),
    "atomic.before": (1, 2, 3),
    "atomic.before_record": (1, 2, 3),
    "atomic.before_commit": (1, 2, 3),
    "atomic.committed": (1, 2, 3),
    "message.matched": (1, 2, 3),
    "message.received": (1, 2, 3),
}
#: The longest a paused worker stays frozen (``faults.PAUSE_ENV``): the test continues it
#: sooner, once the second worker has finished the run; this bounds a stuck case.
PAUSE_BOUND = 60
RELAY_POINTS = {"event.matched", "invoke.start"}
FAN_POINTS = {"fanout.start"}
#: The slice CI runs (middle hits): every point once, every action at least three times,
#: and all three at the one window where a side effect repeats.
CI_SLICE = {
    ("claim.after", "kill"),
    ("step.before_record", "kill"),
    ("step.before_record", "dberror"),
    ("step.before_record", "pause"),
    ("step.recorded", "kill"),
    ("suspend.write", "pause"),
    ("event.matched", "dberror"),
    ("outcome.before", "kill"),
    ("outcome.after", "dberror"),
    ("heartbeat", "pause"),
    ("invoke.start", "kill"),
    ("fanout.start", "kill"),
}


#: The points of the async lane's paths (``atrio``), and the slice of them CI runs.
ASYNC_POINTS = (
    "claim.after",
    "step.before_record",
    "step.recorded",
    "suspend.write",
    "outcome.before",
    "outcome.after",
    "heartbeat",
)
ASYNC_CI_SLICE = {
    ("claim.after", "dberror"),
    ("step.before_record", "kill"),
    ("step.recorded", "dberror"),
    ("outcome.before", "dberror"),
    ("outcome.after", "kill"),
}


#: The points inside an atomic step, and the heartbeat (a kill or a freeze inside one):
#: injected for ``atomic_trio`` (sync) and ``aatomic_trio`` (async).
ATOMIC_POINTS = (
    "atomic.before",
    "atomic.before_record",
    "atomic.before_commit",
    "atomic.committed",
    "heartbeat",
)
#: CI's slice of them: every point, every action. A pause inside the transaction holds
#: SQLite's write lock (and PostgreSQL's row lock) until the process is continued: the
#: taking over waits for it, so those cells are left to ``make faults``.
ATOMIC_CI_SLICE = {
    ("atomic.before", "kill"),
    ("atomic.before_record", "kill"),
    ("atomic.before_record", "dberror"),
    ("atomic.before_record", "pause"),  # a zombie holding the step's row locks
    ("atomic.before_commit", "kill"),
    ("atomic.before_commit", "dberror"),
    ("atomic.committed", "kill"),
    ("atomic.committed", "dberror"),
    ("atomic.committed", "pause"),
    ("heartbeat", "kill"),
}
ASYNC_ATOMIC_CI_SLICE = {
    ("atomic.before_record", "kill"),
    ("atomic.before_commit", "dberror"),
    ("atomic.committed", "kill"),
}
#: The points of a receive (``inbox``: three receives, two of them woken by a message
#: sent while the run waits), and the worker points around them: a kill after the
#: message is matched and before the record is written, a zombie, a cut connection.
RECEIVE_POINTS = (
    "message.matched",
    "message.received",
    "suspend.write",
    "claim.after",
    "outcome.before",
    "heartbeat",
)
#: CI's slice. A worker frozen at ``message.matched`` holds the message's row lock in
#: its open transaction, so the worker taking the run over waits for the whole pause
#: (``PAUSE_BOUND``, 65 s of CI's time on each database): that cell is ``make faults``'.
RECEIVE_CI_SLICE = {
    ("message.matched", "kill"),
    ("message.matched", "dberror"),
    ("message.received", "kill"),
    ("suspend.write", "kill"),
}
ASYNC_RECEIVE_CI_SLICE = {("message.matched", "kill")}
#: The atomic points inside the step's open transaction.
FROZEN_IN_TRANSACTION = {"atomic.before", "atomic.before_record", "atomic.before_commit"}
#: Each kind of job the matrix runs: the job, its points, CI's slice of them.
KINDS = {
    "": (None, faults.POINTS[: faults.POINTS.index("atomic.before")], CI_SLICE),
    "async-": (fault_jobs.atrio, ASYNC_POINTS, ASYNC_CI_SLICE),
    "atomic-": (fault_jobs.atomic_trio, ATOMIC_POINTS, ATOMIC_CI_SLICE),
    "async-atomic-": (fault_jobs.aatomic_trio, ATOMIC_POINTS, ASYNC_ATOMIC_CI_SLICE),
    "receive-": (fault_jobs.inbox, RECEIVE_POINTS, RECEIVE_CI_SLICE),
    "async-receive-": (fault_jobs.ainbox, RECEIVE_POINTS, ASYNC_RECEIVE_CI_SLICE),
}


def _cases() -> list[Any]:
    cases: list[Any] = []
    for kind, (_, points, in_slice) in KINDS.items():
        for point in points:
            for action in faults.ACTIONS:
                for where, nth in zip(("first", "middle", "last"), POSITIONS[point], strict=True):
                    in_ci = where == "middle" and (point, action) in in_slice
                    marks = [] if in_ci else [pytest.mark.faults]
                    case = f"{kind}{point}-{action}-{where}"
                    cases.append(pytest.param(kind, point, action, nth, id=case, marks=marks))
    return cases


@pytest.mark.parametrize(("kind", "point", "action", "nth"), _cases())
def test_fault_matrix(
    workers: Workers,  # noqa: F811
    kind: str,
    point: str,
    action: str,
    nth: int,
) -> None:
    relay = point in RELAY_POINTS
    job = fault_jobs.relay if relay else fault_jobs.fan if point in FAN_POINTS else fault_jobs.trio
    atomic = "atomic" in kind
    if atomic and action == "pause" and point in FROZEN_IN_TRANSACTION and _sqlite():
        pytest.skip(
            "SQLite: a worker frozen inside a transaction holds the one write lock, "
            "so no other can take its run over until it is continued"
        )
    receive = kind.endswith("receive-")
    if receive and action == "pause" and point == "message.matched" and _sqlite():
        pytest.skip(
            "SQLite: a worker frozen inside a receive's transaction holds the one write "
            "lock, so no other can take its run over until it is continued"
        )
    run = (KINDS[kind][0] or job).enqueue()
    if receive:
        send(run.id, fault_jobs.INBOX_TOPIC, {"n": 1})  # before the run starts: kept
    env = {faults.ENV: f"{point}:{action}:{nth}"}
    # Frozen until the second worker has finished the run; not a heartbeat pause: it
    # stops the process wherever the main thread is, on SQLite perhaps holding the write
    # lock, which would keep the second from starting until the pause ends (four leases).
    if action == "pause" and point != "heartbeat":
        env[faults.PAUSE_ENV] = str(PAUSE_BOUND)
    first = workers.start("first", env=env)
    pump: _EventPump | _MessagePump | None = None
    if relay:
        pump = _EventPump(run)
    elif receive:
        pump = _MessagePump(run)

    def pumped(condition: Callable[[], bool]) -> Callable[[], bool]:
        def check() -> bool:
            if pump is not None:
                pump.publish()
            return condition()

        return check

    wait_until(
        pumped(lambda: "FAULT FIRED" in first.log()),
        timeout=90,
        what=f"the fault {point}:{action}:{nth} to fire",
        workers=[first] if action != "kill" else [],
    )
    in_flight: set[str] = set()
    if point == "heartbeat" and action == "kill":
        # Dead: the database holds what it committed. The step whose side effect
        # committed without its record is the one the takeover executes again.
        assert first.proc.wait(timeout=30) == faults.KILLED
        in_flight = _in_flight(run)
    second = workers.start("second")
    workers.wait_started(second)
    wait_until(
        pumped(lambda: _finished(run)),
        timeout=120,
        what="every run to finish",
        workers=[second],
    )
    _settle_first(first, action)
    if atomic:
        _assert_exactly_once(run)
    elif receive:
        _assert_received_once(run, point, action, in_flight)
    else:
        _assert_outcome(run, point, action, nth, relay, in_flight)
    assert second.terminate() == 0


def _sqlite() -> bool:
    return connection.vendor == "sqlite"


def _in_flight(run: JobRun) -> set[str]:
    """The trio steps whose side effect happened but whose record was not completed."""
    completed = StepRecord.objects.filter(run=run, status=StepStatus.COMPLETED)
    return set(effects(run)) - set(completed.values_list("name", flat=True))


def _finished(run: JobRun) -> bool:
    done = {RunStatus.SUCCEEDED, RunStatus.FAILED, RunStatus.CANCELLED}
    return status_of(run) in done and not JobRun.objects.exclude(status__in=done).exists()


def _settle_first(first: Worker, action: str) -> None:
    """The faulty worker: killed (exit 86); or alive, and (paused) continued, its stale
    writes refused, then stopped by SIGTERM like any worker (exit 0)."""
    if action == "kill":
        assert first.proc.wait(timeout=30) == faults.KILLED
        return
    if action == "pause":
        # Continued now that the second worker has taken the run over and finished it
        # (not before: a worker continued before anyone took its run finishes it).
        fired = re.search(r"FAULT FIRED \S+ pid=(\d+)", first.log())
        assert fired is not None, first.log()
        with contextlib.suppress(ProcessLookupError):
            os.kill(int(fired.group(1)), signal.SIGCONT)
        wait_until(
            lambda: "FAULT RESUMED" in first.log(),
            timeout=90,
            what="the paused worker to be continued",
            workers=[first],
        )
    assert first.alive()
    assert first.terminate(timeout=60) == 0


def _assert_outcome(
    run: JobRun, point: str, action: str, nth: int, relay: bool, in_flight: set[str]
) -> None:
    run.refresh_from_db()
    assert (run.status, run.error_code) == (RunStatus.SUCCEEDED, ""), (run.error_code, run.error)
    assert run.attempt <= 4 and run.lease_owner == ""
    records = list(StepRecord.objects.filter(run=run).values_list("name", "status", "attempts"))
    assert {status for _, status, _ in records} == {StepStatus.COMPLETED}, records
    counts = effects(run)
    if point in FAN_POINTS:
        assert run.result == [[11, 12, 13], [21, 22, 23], [31, 32, 33]], run.result
        children = JobRun.objects.filter(parent=run)
        # Each child started exactly once, however often its fan-out step replayed.
        assert sorted(children.values_list("args", flat=True)) == [
            [10 * i + k] for i in (1, 2, 3) for k in (1, 2, 3)
        ]
        assert set(children.values_list("status", flat=True)) == {RunStatus.SUCCEEDED}
        child_effects = Counter(name for child in children for name in effects(child).elements())
        assert child_effects == {f"child{10 * i + k}": 1 for i in (1, 2, 3) for k in (1, 2, 3)}
        return
    if relay:
        assert _pinged(run.result), run.result
        children = JobRun.objects.filter(parent=run)
        assert children.count() == 3  # one child per invoke, however often it replayed
        assert set(children.values_list("status", flat=True)) == {RunStatus.SUCCEEDED}
        child_effects = Counter(name for child in children for name in effects(child).elements())
        assert child_effects == {"child1": 1, "child2": 1, "child3": 1}
        return
    assert run.result == ["s1", "s2", "s3"]
    # Published from a step: exactly one event per publish step, whatever the fault.
    published = Event.objects.filter(name=fault_jobs.TRIO_EVENT, key__startswith=f"{run.pk}:")
    keys = sorted(str(key) for key in published.values_list("key", flat=True))
    assert keys == [f"{run.pk}:{i}" for i in (1, 2, 3)]
    repeated = {name: n for name, n in counts.items() if n != 1}
    assert set(counts) == {"s1", "s2", "s3"}
    if point == "step.before_record":
        # Between the effect and its record: that one step, and only it, ran twice.
        assert repeated == {f"s{nth}": 2}, counts
    elif point == "heartbeat" and action == "kill":
        # Killed inside a step (its effect committed, its record not): that one, twice;
        # killed between steps: none.
        assert len(in_flight) <= 1 and repeated == dict.fromkeys(in_flight, 2), (counts, in_flight)
    elif point == "heartbeat" and action == "pause":
        # Frozen inside whichever step was executing, it finishes that function when it
        # wakes (the effect may not have been written yet when it froze): at most one.
        assert len(repeated) <= 1 and set(repeated.values()) <= {2}, counts
    else:
        assert repeated == {}, counts


def _assert_exactly_once(run: JobRun) -> None:
    """An atomic job: whatever the fault and wherever it struck, each step's effect
    row exists exactly once, and each step is recorded once, completed."""
    run.refresh_from_db()
    assert (run.status, run.error_code) == (RunStatus.SUCCEEDED, ""), (run.error_code, run.error)
    assert run.result == ["s1", "s2", "s3"] and run.lease_owner == ""
    steps = StepRecord.objects.filter(run=run).order_by("id")
    assert list(steps.values_list("name", "status")) == [
        (name, StepStatus.COMPLETED) for i in (1, 2, 3) for name in (f"s{i}", f"nap{i}")
    ]
    assert effects(run) == {"s1": 1, "s2": 1, "s3": 1}


def _assert_received_once(run: JobRun, point: str, action: str, in_flight: set[str]) -> None:
    """``inbox``: whatever the fault, each message was received exactly once, by its own
    receive, in the order sent, and none was lost (a message taken by a receive whose
    record never committed would shift every later one and leave the last receive
    waiting: the run would not finish)."""
    run.refresh_from_db()
    assert (run.status, run.error_code) == (RunStatus.SUCCEEDED, ""), (run.error_code, run.error)
    assert run.result == [{"n": 1}, {"n": 2}, {"n": 3}], run.result
    messages = Message.objects.filter(run=run).order_by("id")
    assert list(messages.values_list("payload", "step")) == [
        ({"n": i}, f"recv{i}") for i in (1, 2, 3)
    ]
    assert all(messages.values_list("received_at", flat=True))
    records = StepRecord.objects.filter(run=run, name__startswith="recv")
    assert set(records.values_list("status", flat=True)) == {StepStatus.COMPLETED}
    repeated = {name: n for name, n in effects(run).items() if n != 1}
    if point == "heartbeat":  # killed or frozen inside a step: that one step, twice
        assert len(repeated) <= 1 and set(repeated.values()) <= {2}, (repeated, in_flight)
    else:
        assert repeated == {}, repeated


class _MessagePump:
    """Sends ``inbox`` its second and third message, each once the run waits for it."""

    def __init__(self, run: JobRun) -> None:
        self.run = run
        self.sent: set[str] = set()

    def publish(self) -> None:
        waiting = StepRecord.objects.filter(
            run=self.run, status=StepStatus.WAITING, kind="receive"
        ).values_list("name", flat=True)
        for name in waiting:
            if name not in self.sent and name != "recv1":
                self.sent.add(name)
                send(self.run.id, fault_jobs.INBOX_TOPIC, {"n": int(name[-1])})


def _pinged(result: Any) -> bool:
    return result[0::2] == [1, 2, 3] and all(isinstance(p, dict) for p in result[1::2])


class _EventPump:
    """Publishes each ``ping`` the relay run waits for, once it waits for it."""

    def __init__(self, run: JobRun) -> None:
        self.run = run
        self.sent: set[str] = set()

    def publish(self) -> None:
        waiting = StepRecord.objects.filter(
            run=self.run, status=StepStatus.WAITING, event="ping"
        ).values_list("name", flat=True)
        for name in waiting:
            if name not in self.sent:
                self.sent.add(name)
                publish_event("ping", {"round": name}, key=f"{self.run.id}:{name[-1]}")


def test_a_database_error_before_the_run_executes_gives_it_back_without_an_attempt(
    workers: Workers,  # noqa: F811
) -> None:
    run = fault_jobs.once.enqueue()
    worker = workers.start("first", env={faults.ENV: "claim.after:dberror"})
    wait_until(lambda: _finished(run), timeout=90, what="the run to finish", workers=[worker])
    run.refresh_from_db()
    # Before: the run sat claimed for a lease, was requeued as a dead worker's, and a
    # job without retries failed X_ATTEMPTS_EXHAUSTED although it never executed.
    assert (run.status, run.attempt, run.error_code) == (RunStatus.SUCCEEDED, 1, "")
    assert effects(run) == {"s1": 1}
    assert "database error before it executed" in worker.log()
    assert worker.terminate() == 0


#: A process whose second thread pauses it (the async lane's and the heartbeat's faults
#: fire off the main thread), on one CPU: the thread that takes a process-directed stop
#: (the main one) then waits for the caller to yield, which widens the window.
PAUSED_FROM_A_THREAD = """
import os
from concurrent.futures import ThreadPoolExecutor
from django_durable_jobs.db import faults
os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
ThreadPoolExecutor(1).submit(faults._pause).result()
"""


def test_a_pause_fired_off_the_main_thread_keeps_its_helper(tmp_path: Any) -> None:
    """Sent to the process, the stop was taken by the main thread, and the caller ran
    on for a moment (19 times in 20 here): it killed the helper that continues the
    process and began its write, then froze holding SQLite's write lock (the worker
    taking over could not start, and nothing would continue the frozen one)."""
    for trial in range(3):
        out = tmp_path / f"paused{trial}.log"
        with out.open("wb") as sink:
            proc = subprocess.Popen(
                [sys.executable, "-c", PAUSED_FROM_A_THREAD],
                env={**os.environ, faults.PAUSE_ENV: "30"},
                stdout=sink,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=die_with_test,
            )
        helpers: list[int] = []
        try:
            stopped = functools.partial(_state_is, proc.pid, "T")
            wait_until(stopped, timeout=30, what="the process to stop")
            time.sleep(0.1)  # the moment the calling thread ran on
            helpers = _children(proc.pid)
            assert [pid for pid in helpers if not _state_is(pid, "Z")], "its helper was killed"
            assert "FAULT RESUMED" not in out.read_text()
            os.kill(proc.pid, signal.SIGCONT)
            assert proc.wait(timeout=30) == 0
            assert "FAULT RESUMED" in out.read_text()
        finally:
            for pid in [proc.pid, *helpers]:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            proc.wait()


def _state_is(pid: int, state: str) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == state
    except FileNotFoundError:
        return False


def _children(pid: int) -> list[int]:
    return [
        int(child)
        for task in Path(f"/proc/{pid}/task").iterdir()
        for child in (task / "children").read_text().split()
    ]


def test_fault_points_are_inert_unless_armed() -> None:
    assert faults.hit.__qualname__ == "hit"  # the empty module function, not an armed one
    faults.arm("")  # no spec: stays inert
    assert faults.hit.__qualname__ == "hit"
    faults.hit("step.before_record")  # nothing happens


@pytest.mark.parametrize("spec", ["nowhere:kill", "heartbeat:explode", "heartbeat:kill:0", "x"])
def test_a_wrong_fault_spec_is_refused(spec: str) -> None:
    with pytest.raises(faults.FaultSpecError, match="DURABLE_JOBS_FAULT"):
        faults.parse(spec)
