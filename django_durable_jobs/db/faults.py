"""Named fault points, for the project's own fault-injection tests (tests/processes/test_faults.py).

Not a user feature: see CONTRIBUTING.md. ``hit(point)`` is called where a crash, a
cut connection or a long pause would hurt most (after a claim commits, between a
step's side effect and its record, around an outcome's write, ...). It does nothing
unless the process started with ``DURABLE_JOBS_FAULT=<point>:<action>[:<nth>]`` in its
environment: ``runjobs`` then calls ``arm()`` once, which replaces ``hit`` by a
function that fires ``action`` on the ``nth`` (default 1st) time ``point`` is hit,
once. Production pays one call of an empty function per point.

Actions: ``kill`` (``os._exit``: no cleanup, no ``finally``), ``dberror`` (the
connection in use is terminated: a real ``pg_terminate_backend`` on PostgreSQL, an
``OperationalError`` elsewhere), ``pause`` (the whole process is stopped with
``SIGSTOP`` for four leases, heartbeat thread included, then continued: a zombie;
``DURABLE_JOBS_FAULT_PAUSE`` seconds instead where set, for a test that continues the
process itself once another worker has taken its run over).
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import threading

from django.db import OperationalError

ENV = "DURABLE_JOBS_FAULT"
#: How long ``pause`` stops the process at most, in seconds (default: four leases).
PAUSE_ENV = "DURABLE_JOBS_FAULT_PAUSE"
POINTS = (
    "claim.after",  # the claim committed; nothing of the run executed yet
    "step.before_record",  # a step's function returned (its side effect is done)
    "step.recorded",  # a step's completed record committed
    "suspend.write",  # about to write a sleep or a wait (the run is about to park)
    "event.matched",  # an event matched a wait; the completed wait not yet written
    "outcome.before",  # an attempt's outcome is about to be written
    "outcome.after",  # an attempt's outcome committed (with the next claim on PostgreSQL)
    "heartbeat",  # the heartbeat thread is about to renew the lease
    "invoke.start",  # a child run was written; the parent's step record was not
    "fanout.start",  # a fan-out's children were written (one insert); the parent's step was not
    "atomic.before",  # an atomic step's transaction is open; its function not called yet
    "atomic.before_record",  # an atomic step's function returned; its record not written
    "atomic.before_commit",  # an atomic step's record is written; not committed yet
    "atomic.committed",  # an atomic step's writes and record committed
)
ACTIONS = ("kill", "dberror", "pause")
#: The exit code of a process killed by a fault (tests tell it from a crash).
KILLED = 86

log = logging.getLogger("django_durable_jobs.faults")


class FaultSpecError(ValueError):
    """``DURABLE_JOBS_FAULT`` names an unknown point or action."""


def hit(point: str, using: str = "default") -> None:
    """A fault point: inert unless ``arm()`` armed this process."""


def arm(spec: str | None = None) -> None:
    """Arm the fault ``spec`` names (default: ``$DURABLE_JOBS_FAULT``); no spec, no-op."""
    spec = os.environ.get(ENV, "") if spec is None else spec
    if not spec:
        return
    point, action, nth = parse(spec)
    lock, seen = threading.Lock(), [0]

    def armed(name: str, using: str = "default") -> None:
        if name != point:
            return
        with lock:
            seen[0] += 1
            if seen[0] != nth:
                return
        fire(point, action, using)

    module = sys.modules[__name__]
    module.hit = armed  # type: ignore[attr-defined]
    log.warning("fault armed: %s:%s on hit %d (a test process)", point, action, nth)


def parse(spec: str) -> tuple[str, str, int]:
    parts = spec.split(":")
    if len(parts) not in (2, 3) or parts[0] not in POINTS or parts[1] not in ACTIONS:
        raise FaultSpecError(
            f"{ENV}={spec!r}: expected <point>:<action>[:<nth>], point one of "
            f"{', '.join(POINTS)}; action one of {', '.join(ACTIONS)}"
        )
    nth = int(parts[2]) if len(parts) == 3 else 1
    if nth < 1:
        raise FaultSpecError(f"{ENV}={spec!r}: <nth> counts from 1")
    return parts[0], parts[1], nth


def fire(point: str, action: str, using: str) -> None:
    # The test waits for this line before it starts the worker that takes over.
    print(f"FAULT FIRED {point}:{action} pid={os.getpid()}", file=sys.stderr, flush=True)
    if action == "kill":
        os._exit(KILLED)
    if action == "pause":
        _pause()
        return
    from . import dialect

    dialect.of(using).cut_connection()  # raises where the server can end the session
    raise OperationalError(f"fault injected at {point}: connection terminated")


def _pause() -> None:
    """Stop the whole process (every thread) for four leases (``PAUSE_ENV``); a helper
    continues it then, if no one did before."""
    from .. import conf

    seconds = float(
        os.environ.get(PAUSE_ENV) or 4 * conf.required_duration("LEASE").total_seconds()
    )
    helper = subprocess.Popen(["sh", "-c", f"sleep {seconds}; kill -CONT {os.getpid()}"])
    # To this thread: sent to the process (os.kill), the stop is taken by some thread
    # and this one, unless it was the main thread, ran on for a moment (in the async
    # lane's threads and the heartbeat's, 29 times in 40), killing the helper and even
    # starting a write before the process stopped. The whole process stops either way.
    signal.pthread_kill(threading.get_ident(), signal.SIGSTOP)
    # Continued early (by the test): the helper goes too, or its late SIGCONT could
    # reach another process that got this pid meanwhile.
    helper.kill()
    helper.wait()
    print(f"FAULT RESUMED pid={os.getpid()}", file=sys.stderr, flush=True)
