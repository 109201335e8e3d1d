""" "wakes": the one meaning of the word in ``jobs list``, ``jobs show`` and the admin's
runs list and run page (``admin/times.py``): when a run that is not running becomes
due on its own. A queued or sleeping run's wake time; for a waiting run "by" the
deadline of the step it waits in (an event or a finished child may wake it any time
before; its ``wake_at`` is only the next safety poll), its wake time when that step has
no deadline; nothing for a running or finished run.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from datetime import datetime

from .. import conf
from ..models import RUNNABLE, JobRun, RunStatus, StepRecord, StepStatus


def wakes(run: JobRun, deadline: datetime | None) -> tuple[str, datetime] | None:
    """``("by", deadline)`` for a waiting run with a deadline, ``("", wake_at)`` for a
    run due on its own, None for a running or finished one."""
    if run.status not in RUNNABLE or run.wake_at is None:
        return None
    if run.status == RunStatus.WAITING and deadline is not None:
        return ("by", deadline)
    return ("", run.wake_at)


def wait_deadlines(runs: Iterable[JobRun]) -> dict[uuid.UUID, datetime]:
    """The deadline of the step each waiting run of ``runs`` waits in (one query)."""
    waiting = [run.pk for run in runs if run.status == RunStatus.WAITING]
    if not waiting:
        return {}
    rows = (
        StepRecord.objects.using(conf.database())
        .filter(run_id__in=waiting, status=StepStatus.WAITING)
        .exclude(deadline=None)
        .order_by("id")
        .values_list("run_id", "deadline")
    )
    # The newest waiting step of a run last, so that it wins.
    return {run_id: deadline for run_id, deadline in rows if deadline is not None}
