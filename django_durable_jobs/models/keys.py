"""The keys a run holds besides its row: its flow-control keys, the events that cancel
it and the idempotency keys it answers to."""

from __future__ import annotations

from django.db import models

from ..db.schema import ExactCharField


class FlowKey(models.Model):
    """One row per limit key of a job: claims lock it to serialise per key
    (docs/explanation/flow-control.md)."""

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


class IdempotencyKey(models.Model):
    """An idempotency key a run answers to besides its own: that of an enqueue a
    ``Debounce`` joined to the run already pending (``gates.save_gated``). A repeat
    with the key gets the run back, also once the run has started."""

    run = models.ForeignKey("JobRun", on_delete=models.CASCADE, related_name="joined_keys")
    job_name = ExactCharField(max_length=200)
    key = ExactCharField(max_length=255)

    class Meta:
        verbose_name = "idempotency key"
        constraints = (
            models.UniqueConstraint(fields=("job_name", "key"), name="durable_joined_key"),
        )

    def __str__(self) -> str:
        return f"{self.job_name} {self.key!r} -> {self.run_id}"
