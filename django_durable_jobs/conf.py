"""``DURABLE_JOBS`` settings: every key has a default (validated in ``checks.py``)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.conf import settings as django_settings
from django.core.signals import setting_changed
from django.dispatch import receiver

from .engine.durations import parse_duration

DEFAULTS: dict[str, Any] = {
    # The database alias that holds runs, steps and events.
    "DATABASE": "default",
    # The database alias the operators' reads go to: the admin's lists, the dashboard,
    # metrics and `jobs stats` (a streaming replica; None: the jobs' own DATABASE).
    # Never the claim, the verbs, a run page or anything that writes.
    "READ_DATABASE": None,
    # The database alias the LISTEN connections use (a worker's wake-up, JobRun.wait's
    # finish): the jobs database reached directly where DATABASE goes through a
    # transaction-pooling PgBouncer, which delivers no NOTIFY (None: DATABASE).
    "LISTEN_DATABASE": None,
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
    # How long a run of a job or version no live worker registers stays parked (a
    # rolling deploy brings a worker that has it) before it fails with X_JOB_UNKNOWN.
    "UNKNOWN_JOB_GRACE": "10m",
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
    "UNKNOWN_JOB_GRACE",
}


def user_settings() -> dict[str, Any]:
    """``settings.DURABLE_JOBS``, read once: a worker asks for several keys per run,
    and each read through Django's lazy settings cost more than the run's own work.
    Read again when the setting changes (``override_settings`` and pytest-django's
    ``settings`` replace the settings object, or send ``setting_changed``), as
    Django's own caches of settings are; a change made in place
    (``settings.DURABLE_JOBS["LEASE"] = ...``) is seen, since the dict is the same."""
    global _user_settings
    # Past LazySettings' own __getattribute__ (Python code, run for every attribute).
    holder = object.__getattribute__(django_settings, "_wrapped")
    if _user_settings is None or _user_settings[0] is not holder:
        value = getattr(django_settings, "DURABLE_JOBS", {})
        _user_settings = (holder, value if isinstance(value, dict) else {})
    return _user_settings[1]


#: The settings object the setting was read from, and what it said.
_user_settings: tuple[Any, dict[str, Any]] | None = None


@receiver(setting_changed)
def _forget(*, setting: str, **kwargs: Any) -> None:
    global _user_settings
    if setting == "DURABLE_JOBS":
        _user_settings = None


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


def read_database() -> str:
    """The alias for reads that tolerate lag (``READ_DATABASE``, else ``DATABASE``)."""
    value = get("READ_DATABASE")
    return database() if value is None else str(value)


def listen_database(using: str) -> str:
    """The alias whose settings a LISTEN connection for the jobs database ``using``
    takes: ``LISTEN_DATABASE`` when ``using`` is the jobs database and it is set."""
    value = get("LISTEN_DATABASE")
    return str(value) if value is not None and using == database() else using
