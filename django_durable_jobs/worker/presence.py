"""Worker rows: each ``runjobs`` process registers itself, beats, and says goodbye.

The worker loop calls ``register`` once, its heartbeat thread calls ``beat`` (one
UPDATE) every ``HEARTBEAT`` and ``sweep`` now and then, and ``run()`` calls
``stopped`` on its way out. Whether a worker is alive is decided by its last beat
against the lease, so a worker killed with SIGKILL shows as lost even before a sweep
marks it. The admin and ``jobs workers`` read rows through ``listing``.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from importlib import metadata
from typing import Any
from uuid import UUID

from django.db import DatabaseError, transaction

from .. import conf
from ..db import dialect
from ..db.executable import Pair, pairs_of
from ..db.leases import LeaseOwner
from ..models import JobRun, RunStatus, Worker, WorkerStatus

log = logging.getLogger("django_durable_jobs.worker")


def _version() -> str:
    try:
        return metadata.version("django-durable-jobs")
    except metadata.PackageNotFoundError:  # running from a checkout that is not installed
        return ""


def register(
    worker_id: str,
    *,
    queues: Sequence[str] | None,
    concurrency: int,
    now: datetime,
    jobs: dict[str, list[int]] | None = None,
) -> Worker:
    """Insert or take over the row named ``worker_id`` as a live worker started ``now``,
    which registers ``jobs`` (job name -> versions).

    ``update_or_create`` reads the row before it writes: on SQLite, a read transaction
    cannot become a write one once another process wrote meanwhile ("database is
    locked" at once, whatever the busy timeout; the children of ``--concurrency N``
    register at the same moment), so the write lock is taken first."""
    using = conf.database()
    defaults = {
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "version": _version(),
        "queues": list(queues or []),
        "concurrency": concurrency,
        "status": WorkerStatus.LIVE,
        "started_at": now,
        "last_heartbeat": now,
        "executed": 0,
        "jobs": jobs or {},
    }
    with transaction.atomic(using=using):
        dialect.of(using).write_first()
        row, _ = Worker.objects.using(using).update_or_create(
            worker_id=worker_id, defaults=defaults
        )
    return row


def beat(worker_id: str, *, now: datetime, executed: int) -> bool:
    """One UPDATE: the worker is alive and has executed ``executed`` runs. False when
    its row is gone (pruned while the process was frozen): register again.

    A lost worker that beats again is live again; a stopped one stays stopped (the
    last beat may race the goodbye)."""
    return bool(
        Worker.objects.using(conf.database())
        .filter(worker_id=worker_id)
        .exclude(status=WorkerStatus.STOPPED)
        .update(status=WorkerStatus.LIVE, last_heartbeat=now, executed=executed)
    )


def stopped(worker_id: str, *, now: datetime, executed: int) -> None:
    """The process exits cleanly."""
    Worker.objects.using(conf.database()).filter(worker_id=worker_id).update(
        status=WorkerStatus.STOPPED, last_heartbeat=now, executed=executed
    )


def sweep(*, now: datetime, lease: timedelta, keep: timedelta) -> tuple[int, int]:
    """Mark live workers silent for longer than ``lease`` as lost, and delete workers
    neither live nor heard of for ``keep``; returns (marked, deleted)."""
    rows = Worker.objects.using(conf.database())
    marked = rows.filter(status=WorkerStatus.LIVE, last_heartbeat__lt=now - lease).update(
        status=WorkerStatus.LOST
    )
    deleted, _ = (
        rows.exclude(status=WorkerStatus.LIVE).filter(last_heartbeat__lt=now - keep).delete()
    )
    return marked, deleted


def live_registries(*, now: datetime, lease: timedelta) -> dict[str, frozenset[Pair]]:
    """The jobs and versions each live worker registers (worker id -> pairs): one
    query of the few live rows, by the index of their beats."""
    rows = Worker.objects.using(conf.database()).filter(
        status=WorkerStatus.LIVE, last_heartbeat__gte=now - lease
    )
    return {
        worker_id: pairs_of(jobs if isinstance(jobs, dict) else {})
        for worker_id, jobs in rows.values_list("worker_id", "jobs")
    }


def is_alive(worker: Worker, *, now: datetime, lease: timedelta) -> bool:
    return worker.status == WorkerStatus.LIVE and worker.last_heartbeat >= now - lease


def shown_status(worker: Worker, *, now: datetime, lease: timedelta) -> str:
    """A live row whose beats stopped is lost, whether or not a sweep marked it yet."""
    if worker.status == WorkerStatus.LIVE and not is_alive(worker, now=now, lease=lease):
        return WorkerStatus.LOST
    return worker.status


@dataclass(frozen=True)
class InHand:
    """A run a worker holds the lease of."""

    id: UUID
    job_name: str


def owner_worker_id(lease_owner: str) -> str:
    """The worker id in a lease owner (``db.leases.LeaseOwner``)."""
    return LeaseOwner.parse(lease_owner).worker_id


def runs_in_hand(worker_ids: Iterable[str]) -> dict[str, list[InHand]]:
    """The running runs of each worker, in one query (running runs are few: at most
    one per worker process, however many runs the table holds)."""
    wanted = set(worker_ids)
    held: dict[str, list[InHand]] = defaultdict(list)
    rows = (
        JobRun.objects.using(conf.database())
        .filter(status=RunStatus.RUNNING)
        .exclude(lease_owner="")
        .values_list("id", "job_name", "lease_owner")
    )
    for run_id, job_name, owner in rows:
        worker_id = owner_worker_id(owner)
        if worker_id in wanted:
            held[worker_id].append(InHand(run_id, job_name))
    return dict(held)


def listing(*, now: datetime) -> list[dict[str, Any]]:
    """Every known worker as plain values (the admin's workers page, ``jobs workers``),
    live ones first; two queries."""
    lease = conf.required_duration("LEASE")
    workers = list(Worker.objects.using(conf.database()).order_by("worker_id"))
    held = runs_in_hand(w.worker_id for w in workers)
    listed = [
        {
            "worker_id": w.worker_id,
            "host": w.host,
            "pid": w.pid,
            "version": w.version,
            "queues": list(w.queues),
            "concurrency": w.concurrency,
            "status": shown_status(w, now=now, lease=lease),
            "alive": is_alive(w, now=now, lease=lease),
            "started_at": w.started_at.isoformat(),
            "last_heartbeat": w.last_heartbeat.isoformat(),
            "executed": w.executed,
            "jobs": dict(w.jobs) if isinstance(w.jobs, dict) else {},
            "runs_in_hand": [
                {"run_id": str(r.id), "job_name": r.job_name} for r in held.get(w.worker_id, [])
            ],
        }
        for w in workers
    ]
    return sorted(listed, key=lambda row: not row["alive"])


class Presence:
    """A worker process's row, kept up to date from its heartbeat thread.

    ``executed`` reads the loop's counter; the beat writes it, so counting a run costs
    no query of its own. Database errors are logged and retried at the next beat: the
    row is for operators, it must never stop a worker. ``heard`` is told, at the
    start and after each beat, what every live worker registers (``live_registries``):
    the claim leaves other workers their jobs and versions (``rollout``).
    """

    def __init__(
        self,
        worker_id: str,
        *,
        queues: Sequence[str] | None,
        concurrency: int,
        lease: timedelta,
        executed: Callable[[], int],
        jobs: dict[str, list[int]] | None = None,
        heard: Callable[[dict[str, frozenset[Pair]]], None] | None = None,
    ) -> None:
        self.worker_id, self.queues, self.concurrency = worker_id, queues, concurrency
        self.lease, self.executed = lease, executed
        self.jobs, self.heard = jobs or {}, heard
        self.keep = conf.required_duration("WORKER_RETENTION")
        self._next_sweep = 0.0
        # The last beat may race the goodbye: a beat after it must not register again.
        self._lock = threading.Lock()
        self._stopped = False

    def register(self, now: datetime) -> None:
        try:
            register(
                self.worker_id,
                queues=self.queues,
                concurrency=self.concurrency,
                now=now,
                jobs=self.jobs,
            )
            self._listen(now)
        except DatabaseError as exc:
            log.warning("worker %s: could not register (%s); retrying", self.worker_id, exc)

    def _listen(self, now: datetime) -> None:
        if self.heard is not None:
            self.heard(live_registries(now=now, lease=self.lease))

    def beat(self, now: datetime) -> None:
        """Called by the heartbeat thread (its own connection); one UPDATE most times."""
        with self._lock:
            if self._stopped:
                return
            if not beat(self.worker_id, now=now, executed=self.executed()):
                self.register(now)
            else:
                self._listen(now)
        if time.monotonic() >= self._next_sweep:
            self._next_sweep = time.monotonic() + self.lease.total_seconds()
            marked, _ = sweep(now=now, lease=self.lease, keep=self.keep)
            if marked:
                log.warning("marked %d worker(s) lost: no heartbeat for %s", marked, self.lease)

    def stopped(self, now: datetime) -> None:
        with self._lock:
            self._stopped = True
        try:
            stopped(self.worker_id, now=now, executed=self.executed())
        except DatabaseError as exc:
            log.warning("worker %s: could not record its stop (%s)", self.worker_id, exc)
