"""Messages to one run (``send``), and waking the run that waits to receive them."""

from __future__ import annotations

import logging
import uuid
from datetime import datetime
from typing import Any

from django.db import transaction
from django.db.models import Exists, Func, OuterRef

from .. import conf
from ..db import dialect
from ..db.migrated import needs_tables
from ..db.run_ids import resolve
from ..engine import clock
from ..engine.serialization import check_payload, unstorable
from ..engine.vocabulary import StepKind
from ..exceptions import InvalidName, RunNotFound, RunStateError
from ..models import FINISHED, JobRun, Message, RunStatus, StepRecord, StepStatus
from .waking import retried, wake_runs

log = logging.getLogger("django_durable_jobs.events")

#: The longest topic (``Message.topic``, as event names).
MAX_TOPIC = 200


@needs_tables
def send(run_id: uuid.UUID | str, topic: str, payload: Any = None) -> Message:
    """Write a message of ``topic`` for the run ``run_id`` in the caller's transaction;
    the run's ``step.receive`` of that topic gets it, once, in the order sent. A run
    waiting to receive it is woken when it commits (a rollback sends nothing).

    Raises ``RunNotFound`` (no such run), ``RunStateError`` (the run has finished: no
    step of it will ever receive the message), ``InvalidName`` (a topic that cannot be
    stored), ``InvalidPayload`` / ``PayloadTooLarge``.

    >>> send(run.id, "approval", {"ok": True})  # doctest: +SKIP
    """
    _topic(topic)
    pk = resolve(run_id)
    using = conf.database()
    clean = check_payload(
        payload,
        what=f"message {topic!r} to run {pk}: the payload",
        limit=int(conf.get("MAX_PAYLOAD_BYTES")),
    )
    status = JobRun.objects.using(using).filter(pk=pk).values_list("status", flat=True).first()
    if status is None:
        raise RunNotFound(f"no run has the id {pk}: message {topic!r} not sent")
    if status in FINISHED:
        raise RunStateError(
            f"run {pk} is {status}: message {topic!r} not sent (no step of a finished run "
            "receives it)"
        )
    now = clock.current().now()
    message = Message.objects.using(using).create(
        run_id=pk, topic=topic, payload=clean, sent_at=now
    )
    woken_at = None
    if transaction.get_connection(using).in_atomic_block:
        # As publish_event: woken in this transaction, so that an idle worker is told
        # (NOTIFY) by its commit; a run another transaction holds is left to the pass
        # after the commit.
        woken_at = now
        wake_receiver(pk, topic, now=dialect.of(using).wake_time(now), skip_locked=True)
    transaction.on_commit(lambda: _wake_after_commit(pk, topic, woken_at), using=using)
    return message


def wake_receiver(
    run_id: uuid.UUID,
    topic: str,
    *,
    now: datetime | Func[Any] | None = None,
    skip_locked: bool = False,
    unwoken_since: datetime | None = None,
) -> int:
    """Make the run runnable now if it is parked in a receive of ``topic``; 1 if it was.
    ``skip_locked``: leave it if another transaction holds its row (the caller's
    transaction must not wait for a worker's); ``unwoken_since``: only if its wake time
    is later than that (not woken since)."""
    using = conf.database()
    receiving = StepRecord.objects.using(using).filter(
        run=OuterRef("pk"), status=StepStatus.WAITING, kind=StepKind.RECEIVE, event=topic
    )
    runs = JobRun.objects.using(using).filter(pk=run_id, status=RunStatus.WAITING)
    runs = runs.filter(Exists(receiving))
    return wake_runs(runs, now, skip_locked=skip_locked, unwoken_since=unwoken_since)


def release_received(run_id: Any, steps: list[str]) -> int:
    """Messages the forgotten receive ``steps`` took become unreceived again, for the
    steps that execute anew (``replay_from``): they get the same messages."""
    taken = Message.objects.using(conf.database()).filter(run_id=run_id, step__in=steps)
    return taken.update(received_at=None, step="")


def _wake_after_commit(run_id: uuid.UUID, topic: str, woken_at: datetime | None) -> None:
    """After the commit: the receiver if the caller's transaction did not wake it (it
    parked meanwhile, or another transaction held it). Never raises: the message is
    sent; if this fails, the run finds it at its next look (``EVENT_POLL``)."""
    retried(
        lambda: wake_receiver(run_id, topic, unwoken_since=woken_at),
        f"message {topic!r} to run {run_id}: the runs receiving it",
    )


def _topic(topic: object) -> str:
    if not isinstance(topic, str) or not topic or len(topic) > MAX_TOPIC:
        raise InvalidName(f"topics are non-empty strings of <= {MAX_TOPIC} chars, got {topic!r}")
    if (why := unstorable(topic)) is not None:
        raise InvalidName(f"topic {topic!r} cannot be stored: {why}")
    return topic
