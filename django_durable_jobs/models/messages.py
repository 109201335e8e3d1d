"""Messages: what ``send`` writes for one run, kept until a ``step.receive`` takes it."""

from __future__ import annotations

import uuid

from django.db import models
from django.db.models import Q

from ..db.fields import InstantField
from ..db.schema import ExactCharField, PartialIndex
from .runs import JobRun


class MessageQuerySet(models.QuerySet["Message"]):
    def unreceived(self, run_id: uuid.UUID, topic: str) -> MessageQuerySet:
        """The messages of ``topic`` sent to the run and not received yet, oldest first."""
        return self.filter(run_id=run_id, topic=topic, received_at__isnull=True).order_by("id")


class Message(models.Model):
    """A message for one run (``send``): received once, by the first ``step.receive`` of
    its topic that finds it, in the order sent (``id``)."""

    id = models.BigAutoField(primary_key=True)
    # No constraint in the database: on MariaDB/MySQL a constraint's check locks the
    # run's row (shared) to the end of the sender's transaction, and the run's worker,
    # writing its step or its park, would wait for that commit. ``send`` checks that
    # the run exists; a purge deletes a run's messages with it (``db/purge.py``).
    run = models.ForeignKey(
        JobRun, on_delete=models.CASCADE, related_name="messages", db_constraint=False
    )
    topic = ExactCharField(max_length=200)
    payload = models.JSONField(null=True, blank=True)
    sent_at = InstantField()
    #: When a receive step took it; NULL while it waits for one.
    received_at = InstantField(null=True, blank=True)
    #: The name of the step that received it ("" until then).
    step = ExactCharField(max_length=200, blank=True, default="")

    objects = MessageQuerySet.as_manager()

    class Meta:
        verbose_name = "message"
        ordering = ("id",)
        indexes = (
            # A receive's look: the oldest message of a topic the run has not received.
            PartialIndex(
                fields=("run", "topic", "id"),
                where=Q(received_at__isnull=True),
                elsewhere=("run", "topic", "received_at", "id"),
                name="durable_message_unreceived",
            ),
        )

    def __str__(self) -> str:
        return f"{self.topic} #{self.id} -> {self.run_id}"
