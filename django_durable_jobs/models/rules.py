"""Run statuses and the rules of their transitions, stated once as data."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from django.db import models
from django.db.models import Q


class RunStatus(models.TextChoices):
    QUEUED = "queued", "queued"
    """Waiting for a worker; runnable once ``wake_at`` has come."""
    RUNNING = "running", "running"
    """Held by a worker (``lease_owner``) until ``lease_expires_at``."""
    SLEEPING = "sleeping", "sleeping"
    """Parked in ``step.sleep`` until ``wake_at``."""
    WAITING = "waiting", "waiting"
    """Parked in ``step.wait_for_event`` (or a child run) until an event or ``wake_at``."""
    SUCCEEDED = "succeeded", "succeeded"
    """Finished; ``result`` holds the return value."""
    FAILED = "failed", "failed"
    """Finished after its last attempt failed; see ``error_code`` and ``error``."""
    CANCELLED = "cancelled", "cancelled"
    """Stopped by an operator; it will not run again unless retried."""
    SKIPPED = "skipped", "skipped"
    """Enqueued over its job's ``RateLimit``: recorded, never executed."""


RUNNABLE = (RunStatus.QUEUED, RunStatus.SLEEPING, RunStatus.WAITING)
FINISHED = (RunStatus.SUCCEEDED, RunStatus.FAILED, RunStatus.CANCELLED, RunStatus.SKIPPED)
#: Runs under a concurrency limit or a throttle: only ``flow.claim_limited`` takes them.
LIMITED = Q(concurrency_limit__isnull=False) | Q(throttle_limit__isnull=False)


class RunState(Protocol):
    """What a rule reads of a run already loaded (a ``JobRun``)."""

    status: str
    lease_owner: str
    wake_at: datetime | None


@dataclass(frozen=True)
class Rule:
    """Which runs a transition applies to, written once as data: the QuerySet reads it
    as its SQL guard, the admin and ``manage.py jobs`` as the predicate that decides
    what they offer. Two spellings of one rule cannot drift apart."""

    #: The statuses it applies to.
    statuses: tuple[str, ...]
    #: Only runs no worker holds (a run cancelled while running keeps its lease).
    unleased: bool = False
    #: Statuses among ``statuses`` that qualify only while ``wake_at`` is later than now.
    later: tuple[str, ...] = ()

    def q(self, now: datetime) -> Q:
        """The guard in SQL."""
        plain = [status for status in self.statuses if status not in self.later]
        guard = Q(status__in=plain)
        if self.later:
            guard |= Q(status__in=self.later, wake_at__gt=now)
        return guard & Q(lease_owner="") if self.unleased else guard

    def holds(self, run: RunState, now: Callable[[], datetime]) -> bool:
        """The guard on a run already read; ``now`` is asked only if the rule needs it
        (the clock may be the database's: a query the run page should not make)."""
        if run.status not in self.statuses or (self.unleased and run.lease_owner):
            return False
        return run.status not in self.later or bool(run.wake_at and run.wake_at > now())


#: ``cancel``: any run not finished (a running one stops at its next step).
CANCELLABLE = Rule((*RUNNABLE, RunStatus.RUNNING))
#: ``retry``: a failed or cancelled run its worker has let go of.
RETRYABLE = Rule((RunStatus.FAILED, RunStatus.CANCELLED), unleased=True)
#: ``wake``: a parked run, or a queued one scheduled for later (a held run, queued
#: without a wake time, waits for its concurrency slot: waking it would jump the limit).
WAKEABLE = Rule(RUNNABLE, later=(RunStatus.QUEUED,))
#: ``replay_from``: any run no worker is executing or still holds.
REPLAYABLE = Rule(tuple(s for s in RunStatus.values if s != RunStatus.RUNNING), unleased=True)

#: What ``retry`` and ``replay_from`` set: runnable, attempts counted afresh.
_NO_ERROR: dict[str, Any] = {"error_code": "", "error": "", "error_type": "", "traceback": ""}
AGAIN: dict[str, Any] = {
    "status": RunStatus.QUEUED,
    "attempt": 0,
    "finished_at": None,
    "result": None,
    # What the attempt that finished the run did not reach: the next one will say.
    "unreached_steps": [],
    **_NO_ERROR,
}


def cancelled(now: datetime, code: str, reason: str) -> dict[str, Any]:
    """The columns of a run cancelled at ``now`` (failure handlers read them too)."""
    return {
        "status": RunStatus.CANCELLED,
        "finished_at": now,
        "wake_at": None,
        **_NO_ERROR,
        "error_code": code,
        "error": reason,
    }
