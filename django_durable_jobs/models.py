"""Runs, step records and events. Public for reading; write through the API."""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from datetime import datetime

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


class FlowKey(models.Model):
    """One row per limit key of a job: claims lock it to serialise per key (SPEC §8)."""

    job_name = models.CharField(max_length=200)
    #: "concurrency" or "throttle".
    kind = models.CharField(max_length=16)
    key = models.CharField(max_length=255, blank=True)

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
    event = models.CharField(max_length=200)
    key = models.CharField(max_length=255, null=True, blank=True)  # noqa: DJ001 - NULL: any

    class Meta:
        verbose_name = "cancel key"
        indexes = (models.Index(fields=("event", "key"), name="durable_cancel_key"),)

    def __str__(self) -> str:
        return f"{self.event} {self.key!r} -> {self.run_id}"


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
    job_name = models.CharField(max_length=200)
    queue = models.CharField(max_length=100, default="default")
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
    idempotency_key = models.CharField(max_length=255, null=True, blank=True)  # noqa: DJ001
    created_at = models.DateTimeField()
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    #: When a queued, sleeping or waiting run becomes runnable.
    wake_at = models.DateTimeField(null=True, blank=True)
    lease_owner = models.CharField(max_length=200, blank=True, default="")
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    parent = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.SET_NULL, related_name="children"
    )
    # Flow control (SPEC §8), copied from the job at enqueue so that the claim can
    # enforce it in SQL. NULL: no such limit; a key of "" limits all runs of the job.
    concurrency_key = models.CharField(max_length=255, null=True, blank=True)  # noqa: DJ001
    concurrency_limit = models.PositiveIntegerField(null=True, blank=True)
    throttle_key = models.CharField(max_length=255, null=True, blank=True)  # noqa: DJ001
    throttle_limit = models.PositiveIntegerField(null=True, blank=True)
    throttle_period = models.DurationField(null=True, blank=True)
    rate_limit_key = models.CharField(max_length=255, null=True, blank=True)  # noqa: DJ001
    debounce_key = models.CharField(max_length=255, null=True, blank=True)  # noqa: DJ001

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
            models.Index(
                fields=("queue", "-priority", "wake_at"),
                condition=Q(status__in=RUNNABLE),
                name="durable_run_runnable",
            ),
            # The same for a worker that serves every queue.
            models.Index(
                fields=("-priority", "wake_at"),
                condition=Q(status__in=RUNNABLE),
                name="durable_run_runnable_all",
            ),
            models.Index(
                fields=("lease_expires_at",),
                condition=Q(status=RunStatus.RUNNING),
                name="durable_run_lease",
            ),
            models.Index(fields=("status", "finished_at"), name="durable_run_finished"),
            models.Index(fields=("job_name", "created_at"), name="durable_run_job"),
            models.Index(fields=("created_at",), name="durable_run_created"),
            # Flow control: the runnable runs under a limit (claimed one key at a time)...
            models.Index(
                fields=("-priority", "wake_at"),
                condition=Q(status__in=RUNNABLE) & LIMITED,
                name="durable_run_limited",
            ),
            # ... the slots of a key (running, or cancelled but not yet stopped) ...
            models.Index(
                fields=("job_name", "concurrency_key", "status"),
                condition=Q(concurrency_limit__isnull=False),
                name="durable_run_concurrency",
            ),
            # ... the runs held back until a slot frees, oldest first ...
            models.Index(
                fields=("job_name", "concurrency_key", "created_at"),
                condition=Q(status__in=RUNNABLE, wake_at__isnull=True),
                name="durable_run_held",
            ),
            # ... the enqueues of a rate-limit key within its period, a debounced run ...
            models.Index(
                fields=("job_name", "rate_limit_key", "created_at"),
                condition=Q(rate_limit_key__isnull=False),
                name="durable_run_rate_limit",
            ),
            models.Index(
                fields=("job_name", "debounce_key"),
                condition=Q(debounce_key__isnull=False, status=RunStatus.QUEUED),
                name="durable_run_debounce",
            ),
            # ... and the starts of a throttle key within its period.
            models.Index(
                fields=("job_name", "throttle_key", "started_at"),
                condition=Q(throttle_limit__isnull=False),
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


class StepRecord(models.Model):
    """One step of one run: its status, memoized output, timing and error."""

    run = models.ForeignKey(JobRun, on_delete=models.CASCADE, related_name="steps")
    name = models.CharField(max_length=200)
    status = models.CharField(max_length=16, choices=StepStatus.choices)
    output = models.JSONField(null=True, blank=True)
    started_at = models.DateTimeField()
    completed_at = models.DateTimeField(null=True, blank=True)
    wake_at = models.DateTimeField(null=True, blank=True)
    event = models.CharField(max_length=200, blank=True, default="")
    # NULL means "any key"; "" is a key like any other.
    correlation_key = models.CharField(max_length=255, null=True, blank=True)  # noqa: DJ001
    event_cursor = models.BigIntegerField(null=True, blank=True)
    #: What made the step: "run", "sleep", "wait", "publish" or "invoke".
    kind = models.CharField(max_length=16, default="run")
    #: When a wait or an invoke gives up.
    deadline = models.DateTimeField(null=True, blank=True)
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
            models.Index(
                fields=("event", "correlation_key"),
                condition=Q(status=StepStatus.WAITING),
                name="durable_step_waiting",
            ),
            # The admin's events page: which waits an event completed.
            models.Index(
                fields=("event", "event_cursor"),
                condition=Q(status=StepStatus.COMPLETED) & ~Q(event=""),
                name="durable_step_event_done",
            ),
        )

    def __str__(self) -> str:
        return f"{self.name} ({self.status})"


class EventQuerySet(models.QuerySet["Event"]):
    def matching(self, name: str, key: str | None, after: int) -> EventQuerySet:
        """Events named ``name`` (with ``key``, if given) after position ``after``, oldest first."""
        qs = self.filter(name=name, id__gt=after)
        if key is not None:
            qs = qs.filter(key=key)
        return qs.order_by("id")


class Event(models.Model):
    """A published event. ``id`` is its position in the event log."""

    id = models.BigAutoField(primary_key=True)
    name = models.CharField(max_length=200)
    key = models.CharField(max_length=255, null=True, blank=True)  # noqa: DJ001 - NULL: no key
    payload = models.JSONField(null=True, blank=True)
    published_at = models.DateTimeField()

    objects = EventQuerySet.as_manager()

    class Meta:
        ordering = ("-id",)
        indexes = (models.Index(fields=("name", "key", "id"), name="durable_event_lookup"),)

    def __str__(self) -> str:
        return f"{self.name} #{self.id}"
