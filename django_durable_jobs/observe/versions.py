"""Job versions as operators see them (``manage.py jobs versions``, the system check
``W032``): each version of each job name, registered by this deploy or held by
unfinished runs, with how many runs are unfinished and the oldest one's age. A version
may leave the code once no run of it is unfinished (docs/how-to/changing-code.md)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any

from django.db.models import Count, Min

from .. import conf
from ..definitions.registry import all_versions
from ..models import JobRun, RunStatus

#: The statuses of a run that has not finished: a later attempt will execute its version.
UNFINISHED = (RunStatus.QUEUED, RunStatus.RUNNING, RunStatus.SLEEPING, RunStatus.WAITING)
HEADERS = ("job", "version", "registered", "unfinished", "oldest")


@dataclass(frozen=True)
class Version:
    job_name: str
    version: int
    #: Whether this deploy (this process's registry) registers it.
    registered: bool
    #: Its runs queued, running, sleeping or waiting.
    unfinished: int
    #: The oldest of those, from its enqueue; None without any.
    oldest_age_seconds: float | None

    def as_json(self) -> dict[str, Any]:
        return asdict(self)


def listing(now: datetime) -> list[Version]:
    """Every version registered here or held by an unfinished run, by name and version:
    one query (a count over the unfinished runs, grouped by job and version)."""
    rows = (
        JobRun.objects.using(conf.database())
        .filter(status__in=UNFINISHED)
        .values("job_name", "job_version")
        .annotate(unfinished=Count("id"), oldest=Min("created_at"))
        .order_by()
    )
    held = {(row["job_name"], row["job_version"]): row for row in rows}
    registered = {(job.name, job.version) for job in all_versions()}
    listed = []
    for name, version in sorted(registered | set(held)):
        row = held.get((name, version))
        oldest = row["oldest"] if row is not None else None
        listed.append(
            Version(
                job_name=name,
                version=version,
                registered=(name, version) in registered,
                unfinished=row["unfinished"] if row is not None else 0,
                oldest_age_seconds=None if oldest is None else (now - oldest).total_seconds(),
            )
        )
    return listed


def stranded(now: datetime) -> list[Version]:
    """The versions with unfinished runs that this deploy does not register: no worker
    of it can execute them (they fail after ``UNKNOWN_JOB_GRACE`` unless another does)."""
    return [v for v in listing(now) if v.unfinished and not v.registered]
