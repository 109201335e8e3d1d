"""``DURABLE_JOBS`` settings: every key has a default (validated in ``checks.py``)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.conf import settings as django_settings

from .engine.durations import parse_duration

DEFAULTS: dict[str, Any] = {
    # The database alias that holds runs, steps and events.
    "DATABASE": "default",
    # Attempts after the first, for jobs that do not say.
    "RETRIES": 3,
    # Base delay of exponential backoff with jitter, and its ceiling.
    "BACKOFF": "2s",
    "MAX_BACKOFF": "1h",
    # Wall time one attempt may execute (None: no limit), and one step.
    "TIMEOUT": None,
    "STEP_TIMEOUT": None,
    # Largest JSON arguments / event payload, and step output / result, in bytes.
    "MAX_PAYLOAD_BYTES": 1_000_000,
    "MAX_OUTPUT_BYTES": 1_000_000,
    # A waiting run re-checks for its event at least this often (a safety net:
    # publishing wakes it at once).
    "EVENT_POLL": "30s",
    # A worker's claim on a run lasts LEASE and is renewed every HEARTBEAT.
    "LEASE": "60s",
    "HEARTBEAT": "10s",
    # How long stopped and lost workers stay listed (admin, `jobs workers`).
    "WORKER_RETENTION": "1d",
    # How often an idle worker looks for work when it cannot be notified.
    "POLL_INTERVAL": "1s",
    # Import every installed app's jobs.py at startup.
    "AUTODISCOVER": True,
    # Async runs one worker process has in flight at once, and the database
    # connections (threads) they share for their steps and outcomes.
    "ASYNC_CONCURRENCY": 100,
    "ASYNC_CONNECTIONS": 4,
    # The module names autodiscovery imports in each installed app (["jobs", "tasks"]
    # for jobs kept where Celery's habit puts them).
    "JOB_MODULES": ["jobs"],
    # Delete finished runs after an age per status, e.g. {"succeeded": "7d",
    # "failed": "30d"}, through an hourly schedule (None: keep every run).
    "RETENTION": None,
}

DURATION_KEYS = {
    "BACKOFF",
    "MAX_BACKOFF",
    "TIMEOUT",
    "STEP_TIMEOUT",
    "EVENT_POLL",
    "LEASE",
    "HEARTBEAT",
    "POLL_INTERVAL",
    "WORKER_RETENTION",
}


def user_settings() -> dict[str, Any]:
    value = getattr(django_settings, "DURABLE_JOBS", {})
    return value if isinstance(value, dict) else {}


def get(key: str) -> Any:
    """One setting, with its default."""
    return user_settings().get(key, DEFAULTS[key])


def duration(key: str) -> timedelta | None:
    value = get(key)
    return None if value is None else parse_duration(value)


def required_duration(key: str) -> timedelta:
    value = duration(key)
    if value is None:
        raise ValueError(f"DURABLE_JOBS[{key!r}] cannot be None")
    return value


def database() -> str:
    return str(get("DATABASE"))
