"""The ORM-backed ``Mailbox``: a receive takes the oldest message of its topic sent to
its run (``step.receive``), inside the transaction that records the step."""

from __future__ import annotations

import uuid
from datetime import datetime

from ..engine.records import MessageHit
from ..models import Message
from . import faults

#: Looks before a receive gives up on messages another transaction took meanwhile (only
#: a worker that lost the run's lease can: its record is then refused anyway).
_TRIES = 5


class OrmMailbox:
    """``Message`` rows on the jobs database."""

    def __init__(self, *, using: str = "default") -> None:
        self.using = using

    def take(self, run_id: str, topic: str, step: str, now: datetime) -> MessageHit | None:
        """The oldest message of ``topic`` not received yet, marked received by ``step``.

        A plain read, then an UPDATE of that row by its primary key guarded by
        ``received_at IS NULL``: nothing waits for rows that senders have not committed
        (their next receive takes them), and a message taken by another transaction is
        skipped for the next one."""
        messages = Message.objects.using(self.using)
        run = uuid.UUID(str(run_id))
        for _ in range(_TRIES):
            oldest = messages.unreceived(run, topic).values_list("id", "payload").first()
            if oldest is None:
                return None
            message_id, payload = oldest
            taken = messages.filter(pk=message_id, received_at__isnull=True).update(
                received_at=now, step=step
            )
            if taken:
                faults.hit("message.matched", self.using)
                return MessageHit(int(message_id), payload)
        return None
