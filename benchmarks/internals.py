"""The package internals the benchmark probes reach into, imported here and only here.

The round-trip and plan probes call the claim and the execution directly (a worker
process cannot be traced statement by statement), and the profile drives the hot path
in-process. Those modules may move inside the package; when one does, this file is the
one place to change. The public paths (``django_durable_jobs``, ``.models``) are
imported where they are used.

Import it inside functions, after ``django.setup()``: the claim imports the models.
"""

from __future__ import annotations

from django_durable_jobs import stats
from django_durable_jobs.async_steps import inline
from django_durable_jobs.claims import claim
from django_durable_jobs.clock import SystemClock
from django_durable_jobs.execution import arun_to_stop, execute, settle, write
from django_durable_jobs.runs import enqueue
from django_durable_jobs.worker import Worker, WorkerOptions

__all__ = [
    "SystemClock",
    "Worker",
    "WorkerOptions",
    "arun_to_stop",
    "claim",
    "enqueue",
    "execute",
    "inline",
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
