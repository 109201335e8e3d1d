"""factory-boy factories for runs, steps and events."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

from factory.declarations import Sequence, SubFactory
from factory.django import DjangoModelFactory

from django_durable_jobs.models import Event, JobRun, RunStatus, StepRecord, StepStatus

T0 = datetime(2026, 1, 1, tzinfo=UTC)
#: Run ids that sort in this order on every database (MariaDB's UUID type compares
#: the groups in another order than the text: each group of the first is lower).
FIRST = uuid.UUID("00000000-0000-4000-8000-000000000000")
LAST = uuid.UUID("ffffffff-ffff-4fff-bfff-ffffffffffff")


class JobRunFactory(DjangoModelFactory[JobRun]):
    class Meta:
        model = JobRun

    job_name = "tests.noop"
    queue = "default"
    status = RunStatus.QUEUED
    created_at = T0
    wake_at = T0


class StepRecordFactory(DjangoModelFactory[StepRecord]):
    class Meta:
        model = StepRecord

    run = SubFactory(JobRunFactory)
    name = Sequence(lambda n: f"step-{n}")
    status = StepStatus.COMPLETED
    started_at = T0
    completed_at = T0
    attempts = 1
    output = Sequence(lambda n: {"n": n})


class EventFactory(DjangoModelFactory[Event]):
    class Meta:
        model = Event

    name = "order.paid"
    key = None
    payload = Sequence(lambda n: {"n": n})
    published_at = T0
