"""System checks for ``DURABLE_JOBS``: a wrong type or value is an error with an id."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.core.checks import CheckMessage, Error, Tags, Warning, register
from django.db import DatabaseError, connections

from .conf import DEFAULTS, DURATION_KEYS
from .engine.durations import parse_duration
from .exceptions import InvalidDuration


def _duration(value: Any, nullable: bool, allow_zero: bool = False) -> str | None:
    if value is None:
        return None if nullable else "it cannot be None"
    try:
        parsed = parse_duration(value)
    except InvalidDuration as exc:
        return str(exc)
    if not parsed and not allow_zero:
        return f"it must be longer than zero, got {value!r}"
    return None


def _positive_int(value: Any) -> str | None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        return f"expected a positive int, got {value!r}"
    return None


def _non_negative_int(value: Any) -> str | None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        return f"expected an int >= 0, got {value!r}"
    return None


def _database(value: Any) -> str | None:
    if not isinstance(value, str) or value not in connections.databases:
        return (
            f"expected one of the DATABASES aliases {sorted(connections.databases)}, got {value!r}"
        )
    return None


def _read_database(value: Any) -> str | None:
    return None if value is None else _database(value)


def _bool(value: Any) -> str | None:
    return None if isinstance(value, bool) else f"expected True or False, got {value!r}"


def _module_names(value: Any) -> str | None:
    if not isinstance(value, list | tuple) or not all(
        isinstance(name, str) and name.replace(".", "_").isidentifier() for name in value
    ):
        return f"expected a list of module names, got {value!r}"
    return None


def _retention(value: Any) -> str | None:
    if value is None:
        return None
    if not isinstance(value, dict) or not value:
        return f"expected a dict of status -> age, or None, got {value!r}"
    # The finished statuses (models.rules.FINISHED), as `jobs purge` takes them.
    statuses = ("succeeded", "failed", "cancelled", "skipped")
    for status, age in value.items():
        if status not in statuses:
            return f"unknown status {status!r}; finished statuses are {', '.join(statuses)}"
        if problem := _duration(age, nullable=False):
            return f"{status}: {problem}"
    return None


_NULLABLE = {"TIMEOUT", "STEP_TIMEOUT"}
#: key -> (check id, validator, what to write instead)
RULES: dict[str, tuple[str, Callable[[Any], str | None], str]] = {
    "DATABASE": ("E002", _database, 'a DATABASES alias, e.g. "default"'),
    "READ_DATABASE": (
        "E032",
        _read_database,
        'a DATABASES alias of a replica of the jobs database, e.g. "replica", or None',
    ),
    "LISTEN_DATABASE": (
        "E033",
        _read_database,
        'a DATABASES alias that reaches the jobs database without a pooler, e.g. "listen", or None',
    ),
    "RETRIES": ("E003", _non_negative_int, "an int >= 0, e.g. 3"),
    "MAX_PAYLOAD_BYTES": ("E004", _positive_int, "a number of bytes, e.g. 1_000_000"),
    "MAX_OUTPUT_BYTES": ("E005", _positive_int, "a number of bytes, e.g. 1_000_000"),
    "AUTODISCOVER": ("E006", _bool, "True or False"),
    "ASYNC_CONCURRENCY": ("E007", _positive_int, "an int >= 1, e.g. 100"),
    "ASYNC_CONNECTIONS": ("E008", _positive_int, "an int >= 1, e.g. 4"),
    "JOB_MODULES": ("E031", _module_names, 'a list of module names, e.g. ["jobs", "tasks"]'),
    "RETENTION": ("E030", _retention, 'e.g. {"succeeded": "7d", "failed": "30d"}, or None'),
}
_DURATION_IDS = {
    "BACKOFF": "E010",
    "MAX_BACKOFF": "E011",
    "TIMEOUT": "E012",
    "STEP_TIMEOUT": "E013",
    "EVENT_POLL": "E014",
    "LEASE": "E015",
    "HEARTBEAT": "E016",
    "POLL_INTERVAL": "E017",
    "WORKER_RETENTION": "E020",
    "UNKNOWN_JOB_GRACE": "E021",
}


def _nullable_duration(value: Any) -> str | None:
    return _duration(value, nullable=True)


def _required_duration(value: Any) -> str | None:
    return _duration(value, nullable=False)


def _backoff_duration(value: Any) -> str | None:
    return _duration(value, nullable=False, allow_zero=True)


# Zero backoff means "retry at once", a zero grace "fail a run nobody can execute at
# once". Any other zero is a mistake: a timeout that always fires (a step) or never (a
# run), a lease already expired when claimed, a heartbeat or poll that spins.
_ZERO_ALLOWED = {"BACKOFF", "MAX_BACKOFF", "UNKNOWN_JOB_GRACE"}
_A_DURATION = 'a duration such as "30s", "5m", "1h", a number of seconds or a timedelta'
for _key in DURATION_KEYS:
    if _key in _NULLABLE:
        RULES[_key] = (_DURATION_IDS[_key], _nullable_duration, _A_DURATION + ", or None")
    elif _key in _ZERO_ALLOWED:
        RULES[_key] = (_DURATION_IDS[_key], _backoff_duration, _A_DURATION)
    else:
        RULES[_key] = (_DURATION_IDS[_key], _required_duration, _A_DURATION)


@register()
def check_settings(**kwargs: Any) -> list[CheckMessage]:
    value = getattr(settings, "DURABLE_JOBS", {})
    if not isinstance(value, dict):
        return [
            Error(
                f"DURABLE_JOBS must be a dict, got {type(value).__name__}",
                hint="Write DURABLE_JOBS = {} (every key has a default).",
                id="django_durable_jobs.E001",
            )
        ]
    errors: list[CheckMessage] = []
    for key in sorted(set(value) - set(DEFAULTS)):
        errors.append(
            Error(
                f"DURABLE_JOBS has an unknown key {key!r}",
                hint=f"Known keys: {', '.join(sorted(DEFAULTS))}.",
                id="django_durable_jobs.E009",
            )
        )
    for key, (check_id, validate, instead) in sorted(RULES.items()):
        if key in value and (problem := validate(value[key])):
            errors.append(
                Error(
                    f"DURABLE_JOBS[{key!r}]: {problem}",
                    hint=f"Write {instead}.",
                    id=f"django_durable_jobs.{check_id}",
                )
            )
    if not errors:
        errors.extend(_lease_and_heartbeat(value))
    return errors


#: Beats per lease below which one slow or lost renewal already loses the lease.
MIN_BEATS_PER_LEASE = 3


def _lease_and_heartbeat(value: dict[str, Any]) -> list[CheckMessage]:
    """A lease renewed no more often than it lasts expires under a healthy worker, and
    another worker takes the run over while it still executes."""
    lease = parse_duration(value.get("LEASE", DEFAULTS["LEASE"]))
    heartbeat = parse_duration(value.get("HEARTBEAT", DEFAULTS["HEARTBEAT"]))
    shown = f"HEARTBEAT {value.get('HEARTBEAT', DEFAULTS['HEARTBEAT'])!r}"
    shown += f", LEASE {value.get('LEASE', DEFAULTS['LEASE'])!r}"
    if heartbeat >= lease:
        return [
            Error(
                f"DURABLE_JOBS: the heartbeat must be shorter than the lease ({shown}): "
                "leases would expire under healthy workers and runs execute twice",
                hint=f"Renew at least {MIN_BEATS_PER_LEASE} times per lease, "
                'e.g. LEASE "60s" and HEARTBEAT "10s".',
                id="django_durable_jobs.E018",
            )
        ]
    if heartbeat * MIN_BEATS_PER_LEASE > lease:
        return [
            Warning(
                f"DURABLE_JOBS: fewer than {MIN_BEATS_PER_LEASE} heartbeats fit in a lease "
                f"({shown}): one slow renewal lets another worker take a live run over",
                hint='Make HEARTBEAT at most a third of LEASE, e.g. LEASE "60s" and '
                'HEARTBEAT "10s".',
                id="django_durable_jobs.W001",
            )
        ]
    return []


@register(Tags.database)
def check_versions(databases: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """W032 when the jobs database holds unfinished runs of a job version this deploy
    does not register (``check --database``; ``migrate`` runs it too): its workers
    cannot execute them, and they fail after ``UNKNOWN_JOB_GRACE`` unless a worker of
    another deploy does."""
    from . import conf
    from .db.migrated import unapplied_migrations
    from .engine import clock
    from .observe import versions

    using = conf.database()
    if not databases or using not in databases:
        return []
    try:
        if unapplied_migrations(using):
            return []  # W030 says so; the tables may not be there
        stranded = versions.stranded(clock.current().now())
    except DatabaseError:
        return []  # unreachable: other checks and the first query say so
    return [
        Warning(
            f"the jobs database holds {v.unfinished} unfinished run(s) of job "
            f"{v.job_name!r} version {v.version}, which this deploy does not register",
            hint=(
                f"Keep @job(name={v.job_name!r}, version={v.version}) until they finish "
                "(manage.py jobs versions lists them); this deploy's workers leave them to a "
                "worker that registers it, and they fail with X_JOB_UNKNOWN once none has "
                'for DURABLE_JOBS["UNKNOWN_JOB_GRACE"].'
            ),
            id="django_durable_jobs.W032",
        )
        for v in stranded
    ]
