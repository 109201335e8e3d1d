"""Step records: one step of one run, its status and memoized output."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.db import models
from django.db.models import Q

from ..db.fields import InstantField
from ..db.schema import ExactCharField, PartialIndex
from ..engine.vocabulary import StepStatus
from .runs import JobRun


class StepRecordQuerySet(models.QuerySet["StepRecord"]):
    def waiting_runs(self, event: str, key: str | None = None) -> models.QuerySet[Any]:
        """The ids (``run_id``) of the runs whose steps wait for ``event``: for any key,
        and with ``key`` also for that key (NULL means "any key"; "" is a key like any
        other). Each match is its own probe of ``durable_step_waiting`` (event, key): as
        one condition (``key = k OR key IS NULL``) the planner read every wait for the
        event and kept this key's, 100-170 ms behind 500,000 runs waiting for it with
        keys of their own (benchmarks/README.md, "The wake-up at 10M")."""
        waits = self.filter(status=StepStatus.WAITING, event=event).order_by()
        anyone = waits.filter(correlation_key__isnull=True).values("run_id")
        if key is None:
            return anyone
        return waits.filter(correlation_key=key).values("run_id").union(anyone, all=True)

    def wake(self, now: datetime) -> int:
        """Sleeping steps end their sleep at ``now`` (with their run's ``wake``: else the
        engine would see the step's old wake time and sleep again)."""
        return self.filter(status=StepStatus.SLEEPING).update(wake_at=now)


class StepRecord(models.Model):
    """One step of one run: its status, memoized output, timing and error."""

    #: Found by ``durable_step_run_name`` (run, name), whose first column it is: an
    #: index of its own would be a second copy of it. No constraint in the database: a
    #: record is written only by the statement that checks its run's lease
    #: (``db/fenced.py``, ``insert_steps``), and goes with its run (a purge deletes both
    #: in one transaction, ``delete()`` through Django's cascade). The constraint's check
    #: cost each step write an index lookup and a lock on its run's row, and each purged
    #: run a lookup of its records (docs/explanation/guarantees.md, "Step records and
    #: their run").
    run = models.ForeignKey(
        JobRun,
        on_delete=models.CASCADE,
        related_name="steps",
        db_index=False,
        db_constraint=False,
    )
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
    #: The run an ``invoke`` step started (not a foreign key: a purged child leaves
    #: its id behind, and the step then starts a new one only on an operator's retry).
    child = models.UUIDField(null=True, blank=True)
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
