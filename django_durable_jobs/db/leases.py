"""Who holds a run's lease, as a value: a worker and one of its claims.

``JobRun.lease_owner`` stores it as ``<worker_id>#<claim>``. The claim part is new
for every claim, so a write left over from an earlier claim by the same worker
process is fenced out like any other worker's. Readers that want the worker (the
admin's worker list, django.tasks' ``worker_id``) parse it back with ``parse``
instead of matching the text. A claim that may take several runs ends with ``BATCH``
(``LeaseOwner.batch``).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

#: Between the worker id and the claim; the last one counts (a worker id may hold it).
SEPARATOR = "#"
#: Ends the claim of a batch (``LeaseOwner.batch``).
BATCH = "+"
#: ``JobRun.attempt_started_by`` of a run whose lease lapsed (``claims.requeue_expired``):
#: a batch that claims it again records its attempt's start before it begins. Never a
#: lease owner: a worker's have a claim, and it has no ``SEPARATOR``.
LAPSED = "lapsed"


@dataclass(frozen=True)
class LeaseOwner:
    worker_id: str
    #: Empty for owners not written by a worker's claim (tests, the inline helpers).
    claim: str = ""

    @classmethod
    def new(cls, worker_id: str, *, batch: bool = False) -> LeaseOwner:
        """The owner for one claim by ``worker_id``; ``batch``: a claim of several runs."""
        return cls(worker_id, uuid.uuid4().hex[:8] + (BATCH if batch else ""))

    @property
    def batch(self) -> bool:
        """Whether the claim may take several runs: they wait in hand and begin one
        after the other, so a lapse of the lease counts a run's attempt only once its
        start is recorded (``JobRun.attempt_started_by``, ``claims.requeue_expired``).
        A claim of one run begins it at once: its lapse counts the attempt."""
        return self.claim.endswith(BATCH)

    @staticmethod
    def of_batch(text: str) -> bool:
        """``LeaseOwner.parse(text).batch``, without building the value (once per run)."""
        return text.endswith(BATCH) and text.rfind(SEPARATOR) > 0

    @classmethod
    def parse(cls, text: str) -> LeaseOwner:
        """``text`` from ``JobRun.lease_owner`` back into its pieces."""
        worker_id, separator, claim = text.rpartition(SEPARATOR)
        if not separator or not worker_id:
            return cls(text)
        return cls(worker_id, claim)

    def __str__(self) -> str:
        return f"{self.worker_id}{SEPARATOR}{self.claim}" if self.claim else self.worker_id
