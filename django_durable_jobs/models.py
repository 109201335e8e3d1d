"""Runs, step records and events. Public for reading; write through the API."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import models
from django.db.models import F, Q

from .db.fields import InstantField
from .db.schema import ExactCharField, PartialIndex

# The engine's word for a step's status is the column's: one enum (no Django in it).
from .engine.vocabulary import StepStatus as StepStatus


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

    def holds(self, run: JobRun, now: Callable[[], datetime]) -> bool:
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
_AGAIN: dict[str, Any] = {
    "status": RunStatus.QUEUED,
    "attempt": 0,
    "finished_at": None,
    "result": None,
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


class FlowKey(models.Model):
    """One row per limit key of a job: claims lock it to serialise per key (SPEC §8)."""

    job_name = ExactCharField(max_length=200)
    #: "concurrency" or "throttle".
    kind = models.CharField(max_length=16)
    key = ExactCharField(max_length=255, blank=True)

    class Meta:
        verbose_name = "flow key"
        constraints = (
            models.UniqueConstraint(fields=("job_name", "kind", "key"), name="durable_flow_key"),
        )

    def __str__(self) -> str:
        return f"{self.job_name} {self.kind} {self.key!r}"


class CancelKey(models.Model):
    """``CancelOn``: publishing ``event`` (with ``key``, unless NULL) cancels ``run``."""

    run = models.ForeignKey("JobRun", on_delete=models.CASCADE, related_name="cancel_keys")
    event = ExactCharField(max_length=200)
    key = ExactCharField(max_length=255, null=True, blank=True)  # NULL: any

    class Meta:
        verbose_name = "cancel key"
        indexes = (models.Index(fields=("event", "key"), name="durable_cancel_key"),)

    def __str__(self) -> str:
        return f"{self.event} {self.key!r} -> {self.run_id}"


class JobRunQuerySet(models.QuerySet["JobRun"]):
    def runnable(self, now: datetime, queues: Iterable[str] | None = None) -> JobRunQuerySet:
        """Runs a worker may claim now, best first: priority, then wake time."""
        qs = self.filter(status__in=RUNNABLE, wake_at__lte=now)
        if queues is not None:
            qs = qs.filter(queue__in=list(queues))
        return qs.order_by("-priority", "wake_at")

    def expired_leases(self, now: datetime) -> JobRunQuerySet:
        """Running runs whose worker stopped renewing its lease."""
        return self.filter(status=RunStatus.RUNNING, lease_expires_at__lt=now)

    # -- transitions outside the worker: each guard is its ``Rule``, stated above once.
    def wake(self, now: datetime) -> int:
        """``WAKEABLE`` runs become runnable at ``now`` (the operator's wake)."""
        return self.filter(WAKEABLE.q(now)).update(wake_at=now)

    def wake_waiting(self, now: datetime) -> int:
        """Waiting runs become runnable at ``now``: what they wait for (an event, a child
        run) has arrived. Sleeping runs keep their sleep."""
        return self.filter(status=RunStatus.WAITING).update(wake_at=now)

    def cancel(self, values: dict[str, Any]) -> int:
        """``CANCELLABLE`` runs get ``values`` (see ``cancelled``). A runnable run drops
        its (stale) lease; a running one keeps it, so its worker's fenced writes are
        refused and it lets go of the run at its next step."""
        changed = self.filter(status__in=RUNNABLE).update(
            **values, lease_owner="", lease_expires_at=None
        )
        return changed + self.filter(status=RunStatus.RUNNING).update(**values)

    def retry(self, now: datetime) -> int:
        """``RETRYABLE`` runs are queued for ``now`` with their attempts counted afresh."""
        return self.filter(RETRYABLE.q(now)).update(**_AGAIN, wake_at=now)

    def replay(self, now: datetime) -> int:
        """``REPLAYABLE`` runs are queued for ``now`` with their attempts counted afresh
        (the caller forgets the steps to run again)."""
        return self.filter(REPLAYABLE.q(now)).update(**_AGAIN, wake_at=now)


class JobRun(models.Model):
    """One execution of a job, across all its attempts and suspensions."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    job_name = ExactCharField(max_length=200)
    queue = ExactCharField(max_length=100, default="default")
    priority = models.IntegerField(default=0)
    status = models.CharField(max_length=16, choices=RunStatus.choices, default=RunStatus.QUEUED)
    args = models.JSONField(default=list, blank=True)
    kwargs = models.JSONField(default=dict, blank=True)
    result = models.JSONField(null=True, blank=True)
    error_code = models.CharField(max_length=40, blank=True, default="")
    error = models.TextField(blank=True, default="")
    error_type = models.CharField(max_length=200, blank=True, default="")
    traceback = models.TextField(blank=True, default="")
    attempt = models.PositiveIntegerField(default=0)
    # NULL, not "": runs without a key must not collide in the unique constraint.
    idempotency_key = ExactCharField(max_length=255, null=True, blank=True)
    created_at = InstantField()
    started_at = InstantField(null=True, blank=True)
    finished_at = InstantField(null=True, blank=True)
    #: When a queued, sleeping or waiting run becomes runnable.
    wake_at = InstantField(null=True, blank=True)
    lease_owner = ExactCharField(max_length=200, blank=True, default="")
    lease_expires_at = InstantField(null=True, blank=True)
    parent = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.SET_NULL, related_name="children"
    )
    #: The schedule that started this run, and the slot it was for (``ctx.scheduled_at``).
    schedule = models.ForeignKey(
        "Schedule", null=True, blank=True, on_delete=models.SET_NULL, related_name="runs"
    )
    scheduled_at = InstantField(null=True, blank=True)
    #: The OpenTelemetry context of the code that enqueued the run (``engine/otel.py``).
    trace_context = models.JSONField(null=True, blank=True)
    # Flow control (SPEC §8), copied from the job at enqueue so that the claim can
    # enforce it in SQL. NULL: no such limit; a key of "" limits all runs of the job.
    concurrency_key = ExactCharField(max_length=255, null=True, blank=True)
    concurrency_limit = models.PositiveIntegerField(null=True, blank=True)
    throttle_key = ExactCharField(max_length=255, null=True, blank=True)
    throttle_limit = models.PositiveIntegerField(null=True, blank=True)
    throttle_period = models.DurationField(null=True, blank=True)
    rate_limit_key = ExactCharField(max_length=255, null=True, blank=True)
    debounce_key = ExactCharField(max_length=255, null=True, blank=True)

    objects = JobRunQuerySet.as_manager()
    #: Set by ``claims.claim``: the status the run had before this worker took it.
    claimed_from: str = RunStatus.QUEUED
    #: Set by ``claims.claim``: True when the run never started before, so it has no steps.
    claimed_fresh: bool = False

    class Meta:
        verbose_name = "run"
        ordering = ("-created_at",)
        constraints = (
            models.UniqueConstraint(
                fields=("job_name", "idempotency_key"), name="durable_run_idempotency_key"
            ),
        )
        indexes = (
            # The claim: runnable runs of a queue by priority, then wake time. Partial, so
            # millions of finished runs do not make it slower.
            PartialIndex(
                fields=("queue", "-priority", "wake_at"),
                where=Q(status__in=RUNNABLE),
                # Without partial indexes: a range on the wake time (due runs only,
                # not those sleeping for days), then a sort of the few by priority.
                elsewhere=("status", "queue", "wake_at", "priority"),
                name="durable_run_runnable",
            ),
            # The same for a worker that serves every queue.
            PartialIndex(
                fields=("-priority", "wake_at"),
                where=Q(status__in=RUNNABLE),
                elsewhere=("status", "wake_at", "priority"),
                name="durable_run_runnable_all",
            ),
            PartialIndex(
                fields=("lease_expires_at",),
                where=Q(status=RunStatus.RUNNING),
                elsewhere=("status", "lease_expires_at"),
                name="durable_run_lease",
            ),
            models.Index(fields=("status", "finished_at"), name="durable_run_finished"),
            models.Index(fields=("job_name", "created_at"), name="durable_run_job"),
            models.Index(fields=("created_at",), name="durable_run_created"),
            # Runs started per minute and per hour (stats, dashboard, metrics).
            models.Index(fields=("started_at",), name="durable_run_started"),
            # Flow control: the runnable runs under a limit (claimed one key at a time)...
            PartialIndex(
                fields=("-priority", "wake_at"),
                where=Q(status__in=RUNNABLE) & LIMITED,
                elsewhere=("status", "wake_at", "priority"),
                name="durable_run_limited",
            ),
            # ... the slots of a key (running, or cancelled but not yet stopped) ...
            PartialIndex(
                fields=("job_name", "concurrency_key", "status"),
                where=Q(concurrency_limit__isnull=False),
                elsewhere=("job_name", "concurrency_key", "status"),
                name="durable_run_concurrency",
            ),
            # ... the runs held back until a slot frees, oldest first ...
            PartialIndex(
                fields=("job_name", "concurrency_key", "created_at"),
                where=Q(status__in=RUNNABLE, wake_at__isnull=True),
                elsewhere=("job_name", "concurrency_key", "status", "created_at"),
                name="durable_run_held",
            ),
            # ... the enqueues of a rate-limit key within its period, a debounced run ...
            PartialIndex(
                fields=("job_name", "rate_limit_key", "created_at"),
                where=Q(rate_limit_key__isnull=False),
                elsewhere=("job_name", "rate_limit_key", "created_at"),
                name="durable_run_rate_limit",
            ),
            PartialIndex(
                fields=("job_name", "debounce_key"),
                where=Q(debounce_key__isnull=False, status=RunStatus.QUEUED),
                elsewhere=("job_name", "debounce_key", "status"),
                name="durable_run_debounce",
            ),
            # ... and the starts of a throttle key within its period.
            PartialIndex(
                fields=("job_name", "throttle_key", "started_at"),
                where=Q(throttle_limit__isnull=False),
                elsewhere=("job_name", "throttle_key", "started_at"),
                name="durable_run_throttle",
            ),
        )

    def __str__(self) -> str:
        return f"{self.job_name} {self.id} ({self.status})"

    @property
    def is_finished(self) -> bool:
        return self.status in FINISHED


class StepRecordQuerySet(models.QuerySet["StepRecord"]):
    def waiting_for(self, event: str, key: str | None = None) -> StepRecordQuerySet:
        """Steps waiting for ``event``; with ``key``, those whose match is that key or none."""
        qs = self.filter(status=StepStatus.WAITING, event=event)
        if key is None:
            return qs.filter(correlation_key__isnull=True)
        return qs.filter(Q(correlation_key__isnull=True) | Q(correlation_key=key))

    def wake(self, now: datetime) -> int:
        """Sleeping steps end their sleep at ``now`` (with their run's ``wake``: else the
        engine would see the step's old wake time and sleep again)."""
        return self.filter(status=StepStatus.SLEEPING).update(wake_at=now)


class StepRecord(models.Model):
    """One step of one run: its status, memoized output, timing and error."""

    run = models.ForeignKey(JobRun, on_delete=models.CASCADE, related_name="steps")
    name = ExactCharField(max_length=200)
    status = models.CharField(max_length=16, choices=[(s.value, s.value) for s in StepStatus])
    output = models.JSONField(null=True, blank=True)
    started_at = InstantField()
    completed_at = InstantField(null=True, blank=True)
    wake_at = InstantField(null=True, blank=True)
    event = ExactCharField(max_length=200, blank=True, default="")
    # NULL means "any key"; "" is a key like any other.
    correlation_key = ExactCharField(max_length=255, null=True, blank=True)
    event_cursor = models.BigIntegerField(null=True, blank=True)
    #: What made the step: "run", "sleep", "wait", "publish" or "invoke".
    kind = models.CharField(max_length=16, default="run")
    #: When a wait or an invoke gives up.
    deadline = InstantField(null=True, blank=True)
    #: When the latest execution began (``started_at`` is the first); NULL: the first.
    last_started_at = InstantField(null=True, blank=True)
    attempts = models.PositiveIntegerField(default=0)
    error = models.TextField(blank=True, default="")
    error_type = models.CharField(max_length=200, blank=True, default="")
    traceback = models.TextField(blank=True, default="")

    objects = StepRecordQuerySet.as_manager()

    class Meta:
        verbose_name = "step"
        ordering = ("id",)
        constraints = (
            models.UniqueConstraint(fields=("run", "name"), name="durable_step_run_name"),
        )
        indexes = (
            PartialIndex(
                fields=("event", "correlation_key"),
                where=Q(status=StepStatus.WAITING),
                elsewhere=("status", "event", "correlation_key"),
                name="durable_step_waiting",
            ),
            # The admin's events page: which waits an event completed.
            PartialIndex(
                fields=("event", "event_cursor"),
                where=Q(status=StepStatus.COMPLETED) & ~Q(event=""),
                elsewhere=("status", "event", "event_cursor"),
                name="durable_step_event_done",
            ),
        )

    def __str__(self) -> str:
        return f"{self.name} ({self.status})"


class EventQuerySet(models.QuerySet["Event"]):
    def unpositioned(self, name: str | None, key: str | None) -> EventQuerySet:
        """Committed events (named ``name``, with ``key``, if given) that no cursor has
        positioned yet."""
        qs = self.filter(position__isnull=True)
        if name is not None:
            qs = qs.filter(name=name)
        if key is not None:
            qs = qs.filter(key=key)
        return qs

    def matching(self, name: str, key: str | None, after: int) -> EventQuerySet:
        """Events named ``name`` (with ``key``, if given) committed after the cursor
        ``after``, oldest first: positioned after it, or not positioned yet."""
        qs = self.filter(Q(position__gt=after) | Q(position__isnull=True), name=name)
        if key is not None:
            qs = qs.filter(key=key)
        return qs.order_by(F("position").asc(nulls_last=True), "id")


class Event(models.Model):
    """A published event. ``id`` identifies it; ``position`` orders it by commit."""

    id = models.BigAutoField(primary_key=True)
    name = ExactCharField(max_length=200)
    key = ExactCharField(max_length=255, null=True, blank=True)  # NULL: no key
    payload = models.JSONField(null=True, blank=True)
    published_at = InstantField()
    #: Ids are handed out at INSERT but events become visible at COMMIT, so ids do not
    #: follow commit order. A wait's cursor gives every committed event it can see
    #: (of its name and key) the next position; an event still NULL committed after
    #: every cursor that could have seen it. See ``store.OrmEventLog.cursor``.
    position = models.BigIntegerField(null=True, blank=True)

    objects = EventQuerySet.as_manager()

    class Meta:
        ordering = ("-id",)
        indexes = (models.Index(fields=("name", "key", "position"), name="durable_event_position"),)

    def __str__(self) -> str:
        return f"{self.name} #{self.id}"


class EventPosition(models.Model):
    """One row: the newest position a cursor handed out (``Event.position``)."""

    id = models.PositiveSmallIntegerField(primary_key=True, default=1)
    position = models.BigIntegerField(default=0)

    class Meta:
        verbose_name = "event position"

    def __str__(self) -> str:
        return f"event position {self.position}"


class ScheduleQuerySet(models.QuerySet["Schedule"]):
    def due(self, now: datetime) -> ScheduleQuerySet:
        """Enabled schedules whose next slot has come."""
        return self.filter(enabled=True, next_run_at__lte=now).order_by("next_run_at")


class Schedule(models.Model):
    """Starts a run of ``job_name`` at every slot of ``cron`` in ``timezone``.

    Declared in code with ``@job(cron=...)`` (``code_key`` set) or added in the admin.
    """

    job_name = ExactCharField(max_length=200)
    cron = models.CharField(max_length=200, help_text='5 fields, e.g. "0 9 * * 1".')
    timezone = models.CharField(max_length=64, default="UTC", help_text='e.g. "Europe/Paris".')
    args = models.JSONField(default=list, blank=True)
    kwargs = models.JSONField(default=dict, blank=True)
    enabled = models.BooleanField(default=True)
    #: The next slot to start; NULL while disabled.
    next_run_at = InstantField(null=True, blank=True)
    #: The slot of the last run started.
    last_run_at = InstantField(null=True, blank=True)
    # NULL for schedules added in the admin; "job|cron|timezone" as first declared (a
    # longer one ends in its hash, schedules.code_key). Exact: jobs named alike but for
    # case are two schedules; 255 keeps the unique index within MariaDB's limits (W003).
    code_key = ExactCharField(max_length=255, null=True, blank=True, unique=True, editable=False)
    #: Why the schedule is disabled when no operator paused it (e.g. removed from code).
    note = models.CharField(max_length=300, blank=True, default="")

    objects = ScheduleQuerySet.as_manager()

    class Meta:
        ordering = ("job_name", "id")
        # Not a partial index: MariaDB has none, and the table is small.
        indexes = (models.Index(fields=("enabled", "next_run_at"), name="durable_schedule_due"),)

    def __str__(self) -> str:
        return f"{self.job_name} ({self.cron} {self.timezone})"


class WorkerStatus(models.TextChoices):
    LIVE = "live", "live"
    """Heartbeating; its last beat is younger than the lease."""
    STOPPED = "stopped", "stopped"
    """Exited cleanly (it released or finished the runs it held)."""
    LOST = "lost", "lost"
    """Stopped beating for longer than the lease: killed, frozen or cut off."""


class Worker(models.Model):
    """One ``runjobs`` process that executes runs, as it last reported itself."""

    #: ``--worker-id`` (default ``host:pid``); a restart with the same id takes over the row.
    worker_id = ExactCharField(max_length=200, unique=True)
    host = models.CharField(max_length=255)
    pid = models.PositiveIntegerField()
    #: The version of django-durable-jobs the process runs.
    version = models.CharField(max_length=50, blank=True, default="")
    #: The queues it serves; empty: every queue.
    queues = models.JSONField(default=list, blank=True)
    #: How many runs this process executes at once.
    concurrency = models.PositiveIntegerField(default=1)
    status = models.CharField(
        max_length=16, choices=WorkerStatus.choices, default=WorkerStatus.LIVE
    )
    started_at = InstantField()
    last_heartbeat = InstantField()
    #: Runs executed to their next stop since the process started (as of the last beat).
    executed = models.PositiveIntegerField(default=0)

    objects: models.Manager[Worker] = models.Manager()

    class Meta:
        ordering = ("worker_id",)
        indexes = (models.Index(fields=("status", "last_heartbeat"), name="durable_worker_beat"),)

    def __str__(self) -> str:
        return f"{self.worker_id} ({self.status})"


class Dashboard(JobRun):
    """No table of its own: gives the admin's dashboard page a place in the app list
    (``/admin/django_durable_jobs/dashboard/``); it shows figures about runs."""

    class Meta:
        proxy = True
        verbose_name = "dashboard"
        verbose_name_plural = "dashboard"
