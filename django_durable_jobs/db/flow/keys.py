"""A flow-control key's lock and its slots (``flow``, ``holds``): what claiming a run
under a limit and holding or letting go of runs both need."""

from __future__ import annotations

from datetime import datetime

from django.db import connections
from django.db.models import Q

from ...models import RUNNABLE, FlowKey, JobRunQuerySet, RunStatus
from ..postgresql import flow as postgres_flow


def lock(using: str, job_name: str, kind: str, key: str) -> None:
    """Lock one key until the transaction ends.

    On PostgreSQL a transaction-level advisory lock (``durable_flow_lock``, migration
    0017), the lock its flow functions take too. Elsewhere the key's ``FlowKey`` row,
    in one upsert (``INSERT ... ON CONFLICT DO UPDATE`` / ``ON DUPLICATE KEY
    UPDATE``): it takes the row's write lock whether or not the row existed, so the
    first claimers (or enqueuers) of a new key queue up on it instead of deadlocking
    as two inserts would on MariaDB, and nothing is read before the lock is held.
    """
    # By vendor, not by ``dialect`` (which imports this module: no cycle, test_layers).
    if connections[using].vendor == "postgresql":  # an advisory lock: no row to write
        postgres_flow.lock(using, job_name, kind, key)
        return
    # MySQL/MariaDB name no conflict target: ON DUPLICATE KEY covers every unique key.
    target = connections[using].features.supports_update_conflicts_with_target
    FlowKey.objects.using(using).bulk_create(
        [FlowKey(job_name=job_name, kind=kind, key=key)],
        update_conflicts=True,
        update_fields=["kind"],
        unique_fields=["job_name", "kind", "key"] if target else None,
    )


def slots(runs: JobRunQuerySet, job_name: str, key: str | None, now: datetime) -> JobRunQuerySet:
    """The runs holding a slot of one concurrency key."""
    return runs.filter(holds_slot(now), job_name=job_name, concurrency_key=key)


def holds_slot(now: datetime) -> Q:
    """Running, or cancelled while running and not yet stopped by its worker (until
    its lease runs out): such a run still executes up to its next step."""
    cancelled_in_hand = Q(status=RunStatus.CANCELLED, lease_expires_at__gte=now) & ~Q(
        lease_owner=""
    )
    return (Q(status=RunStatus.RUNNING) | cancelled_in_hand) & Q(concurrency_limit__isnull=False)


def held(runs: JobRunQuerySet) -> JobRunQuerySet:
    """Runs held back by a saturated concurrency key (queued, no wake time)."""
    return runs.filter(status__in=RUNNABLE, wake_at__isnull=True, concurrency_limit__isnull=False)
