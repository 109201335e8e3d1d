"""The words the engine, the tables and the admin share: a step's status and kind.

One definition each, here at the bottom of the package (no imports), so that the
engine's records, ``exceptions.Suspension`` and the model's ``choices`` all use the
same enum instead of strings compared in several places.
"""

from __future__ import annotations

from enum import StrEnum


class StepStatus(StrEnum):
    """Where a step stands; the ``status`` column of ``StepRecord``."""

    COMPLETED = "completed"
    """Done; ``output`` is memoized and replayed."""
    SLEEPING = "sleeping"
    """Sleeping until ``wake_at``."""
    WAITING = "waiting"
    """Waiting for ``event`` (with ``correlation_key``), a message of the topic ``event``
    (a receive) or a child run (``child``), until its deadline."""
    FAILED = "failed"
    """The last attempt raised; it runs again on retry."""


class StepKind(StrEnum):
    """What a step does; the ``kind`` column of ``StepRecord``, and what a
    ``Suspension`` waits for."""

    RUN = "run"
    """``step.run``: the user's function, once."""
    ATOMIC = "atomic"
    """``step.atomic``: the user's function and the step's record in one transaction on
    the jobs database, so that its writes there take effect exactly once."""
    SLEEP = "sleep"
    """``step.sleep`` / ``sleep_until``: the run parks until ``wake_at``."""
    WAIT = "wait"
    """``step.wait_for_event``: the run parks until the event or the deadline."""
    PUBLISH = "publish"
    """``step.publish``: an event, published once."""
    INVOKE = "invoke"
    """``step.invoke``: one child run; the run parks until it finishes."""
    FANOUT = "fanout"
    """``step.invoke_all`` / ``map``: many child runs; woken by the last."""
    RECEIVE = "receive"
    """``step.receive``: the oldest message of a topic sent to the run (``send``), taken
    in the transaction that records the step; the run parks until one is sent."""
    PATCH = "patch"
    """``ctx.patched``: the run's answer to a code change, decided once (``patches.py``)."""
