"""The heartbeat of a worker process: one thread, on its own connection, that renews
the leases of every run in hand and notices runs cancelled meanwhile."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from datetime import timedelta
from uuid import UUID

from django.db import DatabaseError, connections

from . import conf
from .claims import renew
from .clock import Clock
from .exceptions import RunCancelled
from .models import JobRun, RunStatus
from .workers import Presence

log = logging.getLogger("django_durable_jobs.worker")


class Heartbeat(threading.Thread):
    """One per worker process, on its own connection: renews the leases of the runs in
    hand (the sync one and every async one in flight) every ``every``, in one statement
    per claim, and notices a cancellation so the run stops at its next step."""

    def __init__(
        self, clock: Clock, lease: timedelta, every: timedelta, presence: Presence | None = None
    ) -> None:
        super().__init__(name="durable-jobs-heartbeat", daemon=True)
        self.clock, self.lease, self.every = clock, lease, every.total_seconds()
        self.presence = presence
        self._lock = threading.Lock()
        self._held: dict[UUID, str] = {}  # run id -> the owner that holds its lease
        self._last: UUID | None = None
        self._cancelled: set[UUID] = set()
        self._done = threading.Event()

    def hold(self, owner: str, run_id: UUID) -> None:
        with self._lock:
            self._held[run_id] = owner
            self._last = run_id
            self._cancelled.discard(run_id)

    def drop(self, run_id: UUID | None = None) -> None:
        with self._lock:
            self._held.pop(run_id if run_id is not None else self._last, None)  # type: ignore[arg-type]

    def interruption(self) -> BaseException | None:
        """Asked by the engine before each step of the run held last (the sync one)."""
        return self._interruption(self._last)

    def interruption_for(self, run_id: UUID) -> Callable[[], BaseException | None]:
        """What the engine of ``run_id`` asks before each step."""
        return lambda: self._interruption(run_id)

    def _interruption(self, run_id: UUID | None) -> BaseException | None:
        if run_id not in self._cancelled:
            return None
        return RunCancelled("the run was cancelled while it executed")

    def run(self) -> None:
        try:
            while not self._done.wait(self.every):
                with self._lock:
                    by_owner: dict[str, list[UUID]] = {}
                    for run_id, owner in self._held.items():
                        by_owner.setdefault(owner, []).append(run_id)
                try:
                    for owner, run_ids in by_owner.items():
                        self._beat(owner, *run_ids)
                    if self.presence is not None:
                        self.presence.beat(self.clock.now())
                except DatabaseError as exc:
                    log.warning("heartbeat failed (%s); reconnecting", exc)
                    connections.close_all()
        finally:
            connections.close_all()

    def _beat(self, owner: str, *run_ids: UUID) -> None:
        if renew(owner, run_ids, now=self.clock.now(), lease=self.lease) == len(run_ids):
            return
        lost = (
            JobRun.objects.using(conf.database())
            .filter(pk__in=run_ids)
            .exclude(lease_owner=owner, status=RunStatus.RUNNING)
            .values_list("pk", "status")
        )
        for run_id, status in lost:
            with self._lock:
                if self._held.get(run_id) != owner:
                    continue  # the run finished meanwhile
                if status == RunStatus.CANCELLED:
                    self._cancelled.add(run_id)
                elif status in {RunStatus.RUNNING, RunStatus.QUEUED}:  # taken over
                    log.warning("run %s: lease lost (status %s)", run_id, status)
                # else its outcome was recorded just now, before it was dropped

    def stop(self) -> None:
        self._done.set()
