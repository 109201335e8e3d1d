"""Flow control in the database: concurrency limits and throttles (SPEC §8).

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
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from django.db import connections, transaction
from django.db.models import Count, Q
from django.utils import timezone

from .. import conf
from ..engine.clock import Clock, current
from ..exceptions import UnknownJob
from ..models import RUNNABLE, FlowKey, JobRun, JobRunQuerySet, RunStatus
from ..registry import JobDefinition, all_jobs, get_job
from . import postgres_flow

#: How many candidates one claim looks at before giving up (each costs a transaction).
CANDIDATES = 8


def stamp(run: JobRun, job: JobDefinition, args: Sequence[Any], kwargs: Mapping[str, Any]) -> None:
    """Copy the job's limits and this run's keys onto ``run`` (at enqueue)."""
    if job.concurrency is not None:
        run.concurrency_key = job.concurrency.key_of(job.name, job.fn, args, kwargs)
        run.concurrency_limit = job.concurrency.limit
    if job.throttle is not None:
        run.throttle_key = job.throttle.key_of(job.name, job.fn, args, kwargs)
        run.throttle_limit = job.throttle.limit
        run.throttle_period = job.throttle.per


def has_limits() -> bool:
    """Whether any registered job has a limit (else the claim skips this module)."""
    return any(job.limits for job in all_jobs().values())


def slots(runs: JobRunQuerySet, job_name: str, key: str | None, now: datetime) -> JobRunQuerySet:
    """The runs holding a slot of one concurrency key."""
    return runs.filter(_holds_slot(now), job_name=job_name, concurrency_key=key)


def _holds_slot(now: datetime) -> Q:
    """Running, or cancelled while running and not yet stopped by its worker (until
    its lease runs out): such a run still executes up to its next step."""
    cancelled_in_hand = Q(status=RunStatus.CANCELLED, lease_expires_at__gte=now) & ~Q(
        lease_owner=""
    )
    return (Q(status=RunStatus.RUNNING) | cancelled_in_hand) & Q(concurrency_limit__isnull=False)


def held(runs: JobRunQuerySet) -> JobRunQuerySet:
    """Runs held back by a saturated concurrency key (queued, no wake time)."""
    return runs.filter(status__in=RUNNABLE, wake_at__isnull=True, concurrency_limit__isnull=False)


def claim_limited(
    owner: str,
    *,
    now: datetime,
    lease: timedelta,
    queues: Iterable[str] | None = None,
    limit: int = 1,
    clock: Clock | None = None,
    throttled_only: bool = False,
) -> list[JobRun]:
    """Take up to ``limit`` runnable runs under a limit for ``owner``, best first.

    With ``clock``, the time is read again once a key is locked: waiting for the lock
    (another claimer, SQLite's write lock) must not make a start look earlier than it
    is, or a throttle's window would let more runs start than it says.
    ``throttled_only``: only runs with a throttle (PostgreSQL claims the others in one
    function call, ``dialect.Postgres.claim_limited``).
    """
    using = conf.database()
    runs = JobRun.objects.using(using)
    queue_list = None if queues is None else list(queues)
    # Every runnable run, best first: limited runs are taken until a run under no
    # limit comes first, which is the unlimited claim's (priority holds across both).
    candidates = runs.runnable(now, queue_list)
    claimed: list[JobRun] = []
    done: set[tuple[KeyId, ...]] = set()  # keys with nothing more to take now
    for run in candidates.only(*_CANDIDATE_FIELDS, "priority")[: max(limit, CANDIDATES)]:
        if run.concurrency_limit is None and run.throttle_limit is None:
            break
        if throttled_only and run.throttle_limit is None:
            continue
        keys = tuple(_keys(run))
        if len(claimed) >= limit or keys in done:
            continue
        read_now = clock.now if clock is not None else lambda: now
        # The claim takes the key's best run then, which may not be this one.
        taken = _try(using, run, owner, lease, read_now, queue_list)
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


def _saturated(runs: JobRunQuerySet, run: JobRun, now: datetime) -> bool:
    taken = slots(runs, run.job_name, run.concurrency_key, now).count()
    return taken >= (run.concurrency_limit or 0)


def hold(runs: JobRunQuerySet, job_name: str, key: str | None, now: datetime) -> int:
    """Hold every runnable run of a saturated key until a slot frees (``free_slot``)."""
    return runs.filter(
        job_name=job_name,
        concurrency_key=key,
        concurrency_limit__isnull=False,
        status__in=RUNNABLE,
        wake_at__lte=now,
    ).update(wake_at=None)


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


def free_slot(using: str, run: JobRun, now: datetime) -> int:
    """A run of a concurrency key stopped running: let the oldest held run go.

    Call it with the key locked (``lock``) in the transaction that records the stop,
    so that a claimer cannot hold a run after this looked for one.
    """
    runs = JobRun.objects.using(using)
    return _unhold(runs, run.job_name, run.concurrency_key, 1, now)


def _unhold(runs: JobRunQuerySet, job_name: str, key: str | None, count: int, now: datetime) -> int:
    waiting = held(runs).filter(job_name=job_name, concurrency_key=key)
    ids = list(waiting.order_by("created_at").values_list("id", flat=True)[:count])
    if not ids:
        return 0
    return waiting.filter(id__in=ids).update(wake_at=now)


#: Keys per slot-count query in ``hold_saturated`` (under SQLite's parameter limit).
_KEYS_PER_QUERY = 500


def hold_saturated(using: str, runs: Sequence[JobRun], now: datetime) -> set[str | None]:
    """Write as held the new ``runs`` (of one job, not yet saved) whose concurrency key
    has every slot taken, instead of letting each claim find them due and hold them:
    a backlog enqueued behind a running run costs the claim nothing, and 10,000 runs
    held later by one claim were 10,000 row versions more (0.3 s on PostgreSQL).

    Due runs only (not scheduled for later), under a concurrency limit and no
    throttle, as ``hold`` would hold them. Read without the key's lock (taking it
    here would hold it until the caller's transaction commits, and a worker that
    records an outcome of the key waits for that lock): returns the keys it held
    runs of, for ``let_go_after_commit``, which rechecks them under the lock.
    """
    due = [
        run
        for run in runs
        if run.concurrency_limit is not None
        and run.throttle_limit is None
        and run.wake_at is not None
        and run.wake_at <= now
    ]
    if not due:
        return set()
    job_name, most = due[0].job_name, due[0].concurrency_limit or 0
    taken = JobRun.objects.using(using).filter(_holds_slot(now), job_name=job_name)
    if not taken.exists():  # nothing of the job runs: every key is free (one probe)
        return set()
    keys = list({run.concurrency_key for run in due})
    counts: dict[str | None, int] = {}
    for start in range(0, len(keys), _KEYS_PER_QUERY):
        chunk = keys[start : start + _KEYS_PER_QUERY]
        named = [key for key in chunk if key is not None]
        which = Q(concurrency_key__in=named)
        if len(named) < len(chunk):
            which |= Q(concurrency_key__isnull=True)
        rows = taken.filter(which).values("concurrency_key").annotate(n=Count("id"))
        counts.update((row["concurrency_key"], row["n"]) for row in rows.order_by())
    full = {key for key, n in counts.items() if n >= most}
    for run in due:
        if run.concurrency_key in full:
            run.wake_at = None
    return full


def let_go_after_commit(using: str, job_name: str, keys: set[str | None], most: int) -> None:
    """Once the caller's transaction commits, let held runs of ``keys`` go whose key
    has free slots: a slot freed between ``hold_saturated``'s count and the commit was
    freed by a worker that could not see the runs held then."""

    def recheck() -> None:
        now = current().now()
        for key in keys:
            _let_go_free(using, job_name, key, most, now)

    if keys:
        transaction.on_commit(recheck, using=using)


def _let_go_free(using: str, job_name: str, key: str | None, most: int, now: datetime) -> int:
    """Under the key's lock, let as many held runs of the key go as it has free slots."""
    runs = JobRun.objects.using(using)
    with transaction.atomic(using=using):
        lock(using, job_name, "concurrency", key or "")
        free = _free(runs, job_name, key, most, now)
        return _unhold(runs, job_name, key, free, now) if free > 0 else 0


def unhold_stranded(*, now: datetime, limit: int = 100) -> int:
    """Let held runs go whose key has free slots though no running run will free one
    (e.g. the run that held the slot was requeued after its worker died, then
    cancelled); the worker calls this when it reaps expired leases.

    Cheap on a big backlog: the held keys come from the ``durable_run_held`` index,
    and each is checked with two small counts before anything is locked.
    """
    using = conf.database()
    runs = JobRun.objects.using(using)
    keys = (
        held(runs)
        .order_by()
        .values_list("job_name", "concurrency_key", "concurrency_limit")
        .distinct()[:limit]
    )
    freed = 0
    for job_name, key, most in list(keys):
        if _free(runs, job_name, key, most or 0, now) > 0:  # before any lock: most have none
            freed += _let_go_free(using, job_name, key, most or 0, now)
    return freed


def _free(runs: JobRunQuerySet, job_name: str, key: str | None, most: int, now: datetime) -> int:
    """Slots of a key neither taken nor about to be: runs let go but not yet claimed
    will take free slots themselves."""
    about_to_run = runs.filter(
        job_name=job_name,
        concurrency_key=key,
        concurrency_limit__isnull=False,
        status__in=RUNNABLE,
        wake_at__lte=now,
    )
    return most - slots(runs, job_name, key, now).count() - about_to_run.count()


def held_reason(run: JobRun, now: datetime) -> str:
    """Why a runnable run is not starting because of a limit ("" when none holds it):
    "held by concurrency customer_id=42 (2/2 running)", "throttled until 12:03:10"."""
    if run.status not in RUNNABLE:
        return ""
    runs = JobRun.objects.using(conf.database())
    if run.concurrency_limit is not None and run.wake_at is None:
        taken = slots(runs, run.job_name, run.concurrency_key, now).count()
        label = _key_label(run.job_name, "concurrency", run.concurrency_key)
        return f"held by concurrency{label} ({taken}/{run.concurrency_limit} running)"
    if run.throttle_limit is not None and run.started_at is None and run.wake_at is not None:
        period = run.throttle_period or timedelta(0)
        if run.wake_at > now and _starts(runs, run, now, period) >= run.throttle_limit:
            label = _key_label(run.job_name, "throttle", run.throttle_key)
            until = timezone.localtime(run.wake_at).strftime("%H:%M:%S")
            return f"throttled{label} until {until}"
    return ""


def _starts(runs: JobRunQuerySet, run: JobRun, now: datetime, period: timedelta) -> int:
    return runs.filter(
        job_name=run.job_name,
        throttle_key=run.throttle_key,
        throttle_limit__isnull=False,
        started_at__gt=now - period,
    ).count()


def _key_label(job_name: str, kind: str, key: str | None) -> str:
    """ " customer_id=42" for a parameter key, " key=eu" for a callable, "" for none."""
    if not key:
        return ""
    try:
        limit = getattr(get_job(job_name), kind)
    except UnknownJob:
        limit = None
    name = limit.key if limit is not None and isinstance(limit.key, str) else "key"
    return f" {name}={key}"
