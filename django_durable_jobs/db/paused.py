"""The claim's filter while queues or jobs are paused (``models.Pause``): runs of a
paused queue or job are left where they are.

The worker reads the pauses at most once per poll (``worker/pauses.py``) and passes
them to the claim only while there are some: with none, every claim statement is the
one it always was, and costs what it always did. A precedent: the (job, version)
filter of a rolling deploy (``executable.py``).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from django.db.models import Q


@dataclass(frozen=True)
class Paused:
    """The queues and the jobs paused: their runs are not claimed."""

    queues: frozenset[str] = frozenset()
    jobs: frozenset[str] = frozenset()

    def __bool__(self) -> bool:
        return bool(self.queues or self.jobs)

    def q(self) -> Q:
        """The filter for the ORM's claims (SQLite, MariaDB/MySQL, psycopg2)."""
        return ~Q(queue__in=sorted(self.queues)) & ~Q(job_name__in=sorted(self.jobs))

    @property
    def keys(self) -> tuple[str, str]:
        """The queues and the jobs as PostgreSQL's statements take them: two
        ``text[]`` literals (``queries.sql`` claim_paused)."""
        return text_array(self.queues), text_array(self.jobs)


def text_array(texts: Iterable[str]) -> str:
    """``texts`` as one ``text[]`` literal, each quoted."""
    quoted = (text.replace("\\", "\\\\").replace('"', '\\"') for text in sorted(texts))
    return "{" + ",".join(f'"{text}"' for text in quoted) + "}"
