"""Pause and resume a queue or a job: its runs are not claimed until it is resumed.

A pause is a row (``models.Pause``), shared by every worker (each reads the table at
most once per poll: ``worker/pauses.py``) and kept across restarts. While paused, a
queue's or job's runs stay where they are: queued runs queued, sleeping and waiting
runs parked once due (a wait's time-out included: it is processed when the run is
claimed, after the resume); runs already running finish. The CLI (``jobs pause``,
``jobs resume``, ``jobs pauses``) and the admin's Pauses page call these.

Example::

    pause("queue", "emails", reason="SMTP provider down", by="alice")
    resume("queue", "emails")
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from django.db import IntegrityError, transaction

from .. import conf
from ..definitions.registry import all_jobs, get_job
from ..engine import clock
from ..models import JobRun, Pause, PauseKind


@dataclass(frozen=True)
class Paused:
    """What ``pause`` did: the pause (new or the one already there)."""

    pause: Pause
    #: False: it was paused already (the pause is unchanged).
    created: bool
    #: A queue no registered job uses and no run is in (queues are free-form: it is
    #: paused all the same).
    unknown_queue: bool = False


def pause(
    kind: str, name: str, *, reason: str = "", by: str = "", now: datetime | None = None
) -> Paused:
    """Pause the queue or the job ``name`` (``kind``: ``"queue"`` or ``"job"``). Pausing
    twice keeps the first pause. A job must be registered here (``UnknownJob``
    otherwise); any queue may be paused, one not known yet too."""
    kind = PauseKind(kind)
    if not name:
        raise ValueError(f"a {kind} name is required")
    if kind == PauseKind.JOB:
        get_job(name)  # UnknownJob, with close matches
    using = conf.database()
    pauses = Pause.objects.using(using)
    unknown = kind == PauseKind.QUEUE and not known_queue(name)
    existing = pauses.filter(kind=kind, name=name).first()
    if existing is not None:
        return Paused(existing, created=False, unknown_queue=unknown)
    row = Pause(
        kind=kind,
        name=name,
        reason=reason[:300],
        paused_by=by[:150],
        paused_at=now or clock.current().now(),
    )
    try:
        with transaction.atomic(using=using):
            row.save(using=using, force_insert=True)
    except IntegrityError:  # paused by someone else meanwhile: theirs stands
        return Paused(pauses.get(kind=kind, name=name), created=False, unknown_queue=unknown)
    return Paused(row, created=True, unknown_queue=unknown)


def resume(kind: str, name: str) -> bool:
    """Resume the queue or the job ``name``; False if it was not paused. Workers claim
    its runs again within one poll."""
    kind = PauseKind(kind)
    deleted, _ = Pause.objects.using(conf.database()).filter(kind=kind, name=name).delete()
    return bool(deleted)


def current() -> list[Pause]:
    """Every pause, queues first, by name."""
    return list(Pause.objects.using(conf.database()).order_by("-kind", "name"))


def known_queue(name: str) -> bool:
    """Whether a registered job uses the queue ``name`` or a run is in it."""
    if any(job.queue == name for job in all_jobs().values()):
        return True
    return JobRun.objects.using(conf.database()).filter(queue=name).exists()
