"""Pauses: queues and jobs whose runs no worker claims until an operator resumes them."""

from __future__ import annotations

from django.db import models

from ..db.fields import InstantField
from ..db.schema import ExactCharField


class PauseKind(models.TextChoices):
    QUEUE = "queue", "queue"
    """Every run of the queue (``@job(queue=...)``, ``enqueue(queue=...)``)."""
    JOB = "job", "job"
    """Every run of the job, whatever its queue."""


class Pause(models.Model):
    """A paused queue or job (``manage.py jobs pause``, the admin's Pauses page).

    Its runs stay where they are (queued, or sleeping and waiting once due) until the
    row is deleted (resumed); runs already running finish. Every worker reads the
    table at most once per poll (``worker/pauses.py``), so a pause holds across
    workers and restarts.
    """

    kind = models.CharField(max_length=8, choices=PauseKind.choices)
    #: The queue's or the job's name (exact: queues and jobs differing by case are two).
    name = ExactCharField(max_length=200)
    reason = models.CharField(max_length=300, blank=True, default="")
    #: Who paused it: the admin user, or the CLI's ``--by`` (the OS user by default).
    paused_by = models.CharField(max_length=150, blank=True, default="")
    paused_at = InstantField()

    objects: models.Manager[Pause] = models.Manager()

    class Meta:
        ordering = ("kind", "name")
        verbose_name = "pause"
        constraints = (
            models.UniqueConstraint(fields=("kind", "name"), name="durable_pause_unique"),
        )

    def __str__(self) -> str:
        return f"{self.kind} {self.name}"
