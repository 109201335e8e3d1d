"""Flow control in the database: concurrency limits and throttles (docs/how-to/flow-control.md).

Runs under a limit carry their keys (computed at enqueue, ``stamp``) and are taken
only by ``claim_limited``, one key at a time: the claimer locks the key (``lock``),
which serialises claimers of one key on every database (an advisory lock on
PostgreSQL, the key's ``FlowKey`` row on MariaDB, the single write lock on
SQLite), counts the key's
slots, and only then takes the run. A limit is therefore never exceeded, even for a
moment, whatever the number of workers.

Runs that cannot start are moved out of the claim's way, so a backlog of one key
never slows the others: a saturated concurrency key's runnable runs are *held*
(``wake_at`` NULL, still queued) until one of its runs stops running (``free_slot``,
under the same lock); a throttled key's runs wake when the period lets the next one
start.

This module claims; ``flow_keys`` locks a key and counts its slots, ``held`` holds runs
back and lets them go.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from datetime import datetime, timedelta
from typing import Any

from django.db import connections, transaction

from ... import conf
from ...definitions.registry import all_jobs
from ...engine.clock import Clock
from ...models import JobRun, JobRunQuerySet, RunStatus, best
from .. import dialect
from ..executable import Executable
from ..paused import Paused
from ..postgresql.claims import Finish
from .holds import hold
from .keys import lock, slots

#: How many candidates one claim looks at before giving up (each costs a transaction).
CANDIDATES = 8


def has_limits() -> bool:
    """Whether any registered job has a limit (else the claim skips this module)."""
    return any(job.limits for job in all_jobs().values())


def claim_limited(
    owner: str,
    *,
    now: datetime,
    lease: timedelta,
    queues: Iterable[str] | None = None,
    limit: int = 1,
    clock: Clock | None = None,
    finishes: Sequence[Finish] = (),
    only: Executable | None = None,
    paused: Paused | None = None,
) -> tuple[list[JobRun], frozenset[Any]]:
    """Take up to ``limit`` runnable runs under a limit for ``owner``, best first;
    returns them and the ids of ``finishes`` recorded.

    ``finishes``: outcomes of runs that held a concurrency slot, recorded in the same
    call where the dialect claims concurrency-limited runs in one function call
    (``Dialect.claim_concurrency``, PostgreSQL through psycopg 3); throttled runs
    are then claimed here, a transaction per key, as on every other database.
    ``only``: the jobs and versions this worker may take; ``paused``: the queues and
    jobs it may not (``claims.claim``).
    """
    using = conf.database()
    queue_list = None if queues is None else list(queues)
    fused = dialect.of(using).claim_concurrency(
        owner, now, lease, queue_list, limit, max(limit, CANDIDATES), finishes, only, paused
    )
    if fused is None:
        assert not finishes, "outcomes are held for the claim only where it records them"
        claimed = _claim_by_key(
            owner, now, lease, queue_list, limit, clock, only=only, paused=paused
        )
        return claimed, frozenset()
    claimed, recorded, throttled = fused
    if len(claimed) < limit and throttled:
        claimed += _claim_by_key(
            owner,
            now,
            lease,
            queue_list,
            limit - len(claimed),
            clock,
            throttled_only=True,
            only=only,
            paused=paused,
        )
    return claimed, recorded


def _claim_by_key(
    owner: str,
    now: datetime,
    lease: timedelta,
    queue_list: list[str] | None,
    limit: int,
    clock: Clock | None,
    *,
    only: Executable | None = None,
    paused: Paused | None = None,
    throttled_only: bool = False,
) -> list[JobRun]:
    """``claim_limited``'s way on every database: a transaction per key, its lock first.

    With ``clock``, the time is read again once a key is locked: waiting for the lock
    (another claimer, SQLite's write lock) must not make a start look earlier than it
    is, or a throttle's window would let more runs start than it says.
    ``throttled_only``: only runs with a throttle (the others were claimed in one call).
    """
    using = conf.database()
    runs = JobRun.objects.using(using)
    # Every runnable run, best first: limited runs are taken until a run under no
    # limit comes first, which is the unlimited claim's (priority holds across both).
    candidates = runs.runnable(now, queue_list)
    if only is not None:
        candidates = candidates.filter(only.q())
    if paused:
        candidates = candidates.filter(paused.q())
    claimed: list[JobRun] = []
    done: set[tuple[KeyId, ...]] = set()  # keys with nothing more to take now
    for run in best(
        candidates.only(*_CANDIDATE_FIELDS, "priority", "wake_at"),
        max(limit, CANDIDATES),
        queues=queue_list,
    ):
        if run.concurrency_limit is None and run.throttle_limit is None:
            break
        if throttled_only and run.throttle_limit is None:
            continue
        keys = tuple(_keys(run))
        if len(claimed) >= limit or keys in done:
            continue
        read_now = clock.now if clock is not None else lambda: now
        # The claim takes the key's best run then, which may not be this one.
        taken = _try(using, run, owner, lease, read_now, queue_list, only, paused)
        if taken is None:
            done.add(keys)
        else:
            claimed.append(taken)
    return claimed


#: (job name, kind, key): one key, and one lock (``lock``).
KeyId = tuple[str, str, str]


def _keys(run: JobRun) -> list[KeyId]:
    """The keys a claim of ``run`` locks, always in this order (no deadlock)."""
    keys = []
    if run.concurrency_limit is not None:
        keys.append((run.job_name, "concurrency", run.concurrency_key or ""))
    if run.throttle_limit is not None:
        keys.append((run.job_name, "throttle", run.throttle_key or ""))
    return keys


_CANDIDATE_FIELDS = (
    "id",
    "job_name",
    "status",
    "started_at",
    "concurrency_key",
    "concurrency_limit",
    "throttle_key",
    "throttle_limit",
    "throttle_period",
)


def _try(
    using: str,
    run: JobRun,
    owner: str,
    lease: timedelta,
    read_now: Callable[[], datetime],
    queues: list[str] | None,
    only: Executable | None = None,
    paused: Paused | None = None,
) -> JobRun | None:
    """Lock the keys of ``run``, then take the best runnable run of those keys (the
    candidate list is stale once the lock was waited for), in one transaction."""
    with transaction.atomic(using=using):
        # The key rows first: nothing is read before them, so every count below sees
        # the claims committed before the lock (SQLite: the first statement writes).
        for key in _keys(run):
            lock(using, *key)
        now = read_now()
        runs = JobRun.objects.using(using)
        best = runs.runnable(now, queues).filter(
            job_name=run.job_name,
            concurrency_key=run.concurrency_key,
            concurrency_limit=run.concurrency_limit,
            throttle_key=run.throttle_key,
            throttle_limit=run.throttle_limit,
        )
        if only is not None:
            best = best.filter(only.q())
        if paused:
            best = best.filter(paused.q())
        if connections[using].features.has_select_for_update_skip_locked:
            best = best.select_for_update(skip_locked=True)
        candidate = best.only(*_CANDIDATE_FIELDS).first()
        if candidate is None:
            return None  # taken or held by other workers meanwhile
        if candidate.concurrency_limit is not None and _saturated(runs, candidate, now):
            hold(runs, candidate.job_name, candidate.concurrency_key, now)
            return None
        fresh = candidate.started_at is None
        if candidate.throttle_limit is not None and fresh and _throttled(runs, candidate, now):
            return None
        return _take(runs, candidate, owner, now, lease)


def _saturated(runs: JobRunQuerySet, run: JobRun, now: datetime) -> bool:
    taken = slots(runs, run.job_name, run.concurrency_key, now).count()
    return taken >= (run.concurrency_limit or 0)


def _throttled(runs: JobRunQuerySet, run: JobRun, now: datetime) -> bool:
    """True when the key's period is full; its waiting runs then wake when it is not."""
    period, limit = run.throttle_period or timedelta(0), run.throttle_limit or 0
    starts = list(
        runs.filter(
            job_name=run.job_name,
            throttle_key=run.throttle_key,
            throttle_limit__isnull=False,
            started_at__gt=now - period,
        )
        .order_by("-started_at")
        .values_list("started_at", flat=True)[:limit]
    )
    if len(starts) < limit:
        return False
    # The limit-th latest start leaves the window first: then one more may start.
    until = (starts[-1] or now) + period
    runs.filter(
        job_name=run.job_name,
        throttle_key=run.throttle_key,
        throttle_limit__isnull=False,
        status=RunStatus.QUEUED,
        started_at__isnull=True,
        wake_at__lte=now,
    ).update(wake_at=until)
    return True


def _take(
    runs: JobRunQuerySet, run: JobRun, owner: str, now: datetime, lease: timedelta
) -> JobRun | None:
    taken = runs.filter(pk=run.pk).take(owner, now, lease)
    if not taken:
        return None
    claimed = runs.get(pk=run.pk)
    claimed.claimed_from = run.status
    claimed.claimed_fresh = run.started_at is None
    return claimed
