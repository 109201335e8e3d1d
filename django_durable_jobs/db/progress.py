"""Writing a run's progress (``ctx.set_progress``, ``engine/progress.py``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..models import JobRun, RunStatus


def progress_writer(run: JobRun, using: str, owner: str | None) -> Callable[[Any], None]:
    """A function that stores a value as ``run``'s progress: one UPDATE, fenced by the
    lease of ``owner`` like every write of the worker (a worker that lost the run writes
    nothing), which also sets ``run.progress``. Nothing is built before a first write:
    most runs never report progress, and a no-op run is a few hundred microseconds."""

    def write(value: Any) -> None:
        rows = JobRun.objects.using(using).filter(pk=run.pk)
        if owner is not None:
            rows = rows.filter(lease_owner=owner, status=RunStatus.RUNNING)
        if rows.update(progress=value):
            run.progress = value

    return write
