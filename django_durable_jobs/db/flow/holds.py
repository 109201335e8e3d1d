"""Runs held back by a saturated concurrency key (queued, no wake time), and letting
them go: when a slot frees (``free_slot``, under the key's lock), after an enqueue that
held them commits (``let_go_after_commit``), or when no running run will free one
(``unhold_stranded``). ``held_reason`` says why a run is not starting."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta

from django.db import transaction
from django.db.models import Count, Q
from django.utils import timezone

from ... import conf
from ...definitions.registry import get_job
from ...engine.clock import Clock, current
from ...exceptions import UnknownJob
from ...models import RUNNABLE, JobRun, JobRunQuerySet
from .keys import held, holds_slot, lock, slots


def hold(runs: JobRunQuerySet, job_name: str, key: str | None, now: datetime) -> int:
    """Hold every runnable run of a saturated key until a slot frees (``free_slot``)."""
    return runs.filter(
        job_name=job_name,
        concurrency_key=key,
        concurrency_limit__isnull=False,
        status__in=RUNNABLE,
        wake_at__lte=now,
    ).update(wake_at=None)


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
    taken = JobRun.objects.using(using).filter(holds_slot(now), job_name=job_name)
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
        for key in keys:
            _let_go_free(using, job_name, key, most, current())

    if keys:
        transaction.on_commit(recheck, using=using)


def _let_go_free(using: str, job_name: str, key: str | None, most: int, clock: Clock) -> int:
    """Under the key's lock, let as many held runs of the key go as it has free slots.

    The time is read once the lock is held: a run that stopped while this waited for
    the lock let a held run go (``free_slot``) at a later time than one read before,
    and counted at that earlier time the run let go is not about to take the slot, so
    a second held run went too, and the sweep said it found one stranded."""
    runs = JobRun.objects.using(using)
    with transaction.atomic(using=using):
        lock(using, job_name, "concurrency", key or "")
        now = clock.now()
        free = _free(runs, job_name, key, most, now)
        return _unhold(runs, job_name, key, free, now) if free > 0 else 0


def unhold_stranded(*, now: datetime, limit: int = 100, clock: Clock | None = None) -> int:
    """Let held runs go whose key has free slots though no running run will free one
    (e.g. the run that held the slot was requeued after its worker died, then
    cancelled); the worker calls this when it reaps expired leases. ``now`` picks the
    keys to look at; under each key's lock the time is read again from ``clock``
    (default: the installed one), as the claim does (``limits._try``).

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
            freed += _let_go_free(using, job_name, key, most or 0, clock or current())
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
