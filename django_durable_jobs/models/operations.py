"""Schedules and worker processes: what starts runs and what executes them."""

from __future__ import annotations

from datetime import datetime

from django.db import models

from ..db.fields import InstantField
from ..db.schema import ExactCharField


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
    #: The jobs it can execute: job name -> the versions it registers (a rolling
    #: deploy's workers differ; a worker leaves a run to one that registers its version).
    jobs = models.JSONField(default=dict, blank=True)

    objects: models.Manager[Worker] = models.Manager()

    class Meta:
        ordering = ("worker_id",)
        indexes = (models.Index(fields=("status", "last_heartbeat"), name="durable_worker_beat"),)

    def __str__(self) -> str:
        return f"{self.worker_id} ({self.status})"


class Doorbell(models.Model):
    """One row: a counter bumped after each commit that enqueued runs or made runs
    runnable, where idle workers cannot be notified (MariaDB/MySQL: no LISTEN/NOTIFY).
    An idle worker reads it every few milliseconds (``worker/wakeup.py``) instead of
    asking the runs table for work."""

    id = models.PositiveSmallIntegerField(primary_key=True, default=1)
    rung = models.BigIntegerField(default=0)

    class Meta:
        verbose_name = "doorbell"

    def __str__(self) -> str:
        return f"doorbell rung {self.rung} times"


class RunTally(models.Model):
    """The runs finished since counting began, by job and status, with their durations
    in buckets: the Prometheus counters and histogram (``observe/counters.py``). A scrape
    adds the runs finished since ``folded_until``; a purge or a retry never lowers them."""

    #: What is counted; one row ("runs").
    name = models.CharField(max_length=50, unique=True)
    #: When counting began (the counters' ``_created``).
    since = InstantField()
    #: Runs that finished before it are counted; later ones at a later scrape.
    folded_until = InstantField()
    #: job -> status -> {"count", "sum" (seconds), "buckets" (runs per bucket, not
    #: cumulative)}.
    tallies = models.JSONField(default=dict, blank=True)

    objects: models.Manager[RunTally] = models.Manager()

    def __str__(self) -> str:
        return f"{self.name} since {self.since.isoformat()}"
