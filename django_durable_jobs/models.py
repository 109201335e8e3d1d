"""Runs, step records and events. Public for reading; write through the API."""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from datetime import datetime

from django.db import models
from django.db.models import F, Q

from .fields import InstantField
from .schema import ExactCharField, PartialIndex


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


RUNNABLE = (RunStatus.QUEUED, RunStatus.SLEEPING, RunStatus.WAITING)
FINISHED = (RunStatus.SUCCEEDED, RunStatus.FAILED, RunStatus.CANCELLED)


class StepStatus(models.TextChoices):
    COMPLETED = "completed", "completed"
    """Done; ``output`` is memoized and replayed."""
    SLEEPING = "sleeping", "sleeping"
    """Sleeping until ``wake_at``."""
    WAITING = "waiting", "waiting"
    """Waiting for ``event`` (with ``correlation_key``) until its deadline."""
    FAILED = "failed", "failed"
    """The last attempt raised; it runs again on retry."""


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


class StepRecord(models.Model):
    """One step of one run: its status, memoized output, timing and error."""

    run = models.ForeignKey(JobRun, on_delete=models.CASCADE, related_name="steps")
    name = ExactCharField(max_length=200)
    status = models.CharField(max_length=16, choices=StepStatus.choices)
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
    # NULL for schedules added in the admin; "job|cron|timezone" as first declared.
    code_key = models.CharField(max_length=300, null=True, blank=True, unique=True, editable=False)
    #: Why the schedule is disabled when no operator paused it (e.g. removed from code).
    note = models.CharField(max_length=300, blank=True, default="")

    objects = ScheduleQuerySet.as_manager()

    class Meta:
        ordering = ("job_name", "id")
        # Not a partial index: MariaDB has none, and the table is small.
        indexes = (models.Index(fields=("enabled", "next_run_at"), name="durable_schedule_due"),)

    def __str__(self) -> str:
        return f"{self.job_name} ({self.cron} {self.timezone})"
