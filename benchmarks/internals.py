"""The package internals the benchmark probes reach into, imported here and only here.

The round-trip and plan probes call the claim and the execution directly (a worker
process cannot be traced statement by statement), and the profile drives the hot path
in-process. Those modules may move inside the package; when one does, this file is the
one place to change. The public paths (``django_durable_jobs``, ``.models``) are
imported where they are used.

Import it inside functions, after ``django.setup()``: the claim imports the models.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django_durable_jobs.db import dialect
from django_durable_jobs.db.claims import claim, claim_unlimited
from django_durable_jobs.db.executable import Executable
from django_durable_jobs.db.paused import Paused
from django_durable_jobs.db.postgresql import finished
from django_durable_jobs.db.postgresql import sql as postgresql_sql
from django_durable_jobs.definitions.registry import all_versions
from django_durable_jobs.engine.async_steps import inline
from django_durable_jobs.engine.clock import SystemClock, current
from django_durable_jobs.engine.durations import parse_duration
from django_durable_jobs.observe import counters, rollups, stats
from django_durable_jobs.verbs import bulk
from django_durable_jobs.verbs.enqueue import enqueue
from django_durable_jobs.worker.execution import arun_to_stop, execute
from django_durable_jobs.worker.loop import Worker, WorkerOptions
from django_durable_jobs.worker.pauses import PauseWatch
from django_durable_jobs.worker.recording import settle, write


def database_now() -> datetime:
    """Now on the database's clock (the one the worker claims at): a run enqueued at the
    database's now is not yet due at Python's when the database's clock runs ahead."""
    return current().now()


__all__ = [
    "Executable",
    "PauseWatch",
    "Paused",
    "SystemClock",
    "Worker",
    "WorkerOptions",
    "all_versions",
    "arun_to_stop",
    "bulk",
    "claim",
    "claim_unlimited",
    "counters",
    "database_now",
    "enqueue",
    "execute",
    "inline",
    "parse_duration",
    "postgresql_sql",
    "rollups",
    "settle",
    "stats",
    "stop_heartbeat",
    "write",
]


def stop_heartbeat(worker: Worker) -> None:
    """Stop the heartbeat thread of a worker driven with ``run_once()`` (its ``run()``
    loop would stop it on the way out)."""
    beat = getattr(worker, "_beat", None)
    if beat is not None:
        beat.stop()


def polling_waits(using: str) -> Any:
    """Within the block, ``JobRun.wait`` polls as on SQLite and MariaDB (the ORM's
    dialect, which does not listen): benchmarks/messages.py's contrast."""
    return dialect.chosen(using, dialect.Dialect(using))


def stop_listeners() -> None:
    """Close ``JobRun.wait``'s LISTEN connection (before the database is dropped)."""
    finished.stop_all()
