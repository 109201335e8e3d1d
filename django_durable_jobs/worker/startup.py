"""What ``runjobs`` checks and does before its loop starts: this app's migrations are
applied, the URLconf is imported, and which jobs this process knows and where it looked
for them is said."""

from __future__ import annotations

import logging
from datetime import timedelta

from django.core.management.base import CommandError
from django.db import DatabaseError

from .. import conf
from ..db.migrated import unapplied_message, unapplied_migrations
from ..definitions.discovery import not_imported, where_jobs_come_from
from ..definitions.registry import JobDefinition, all_jobs
from ..engine.durations import format_duration

log = logging.getLogger("django_durable_jobs.worker")


def refuse_unmigrated() -> None:
    """Stop at once, saying what to do, rather than retrying "no such table" forever."""
    using = conf.database()
    try:
        missing = unapplied_migrations(using)
    except DatabaseError as exc:  # unreachable now: the loop retries until it is back
        log.warning("cannot check the migrations of database %r (%s); starting anyway", using, exc)
        return
    if missing:
        raise CommandError(f"{unapplied_message(using, missing)} first")


def import_urlconf() -> None:
    """Import the URLconf, as Django's URL check does when a command starts, so that a
    job in a module the views import (``mysite/jobs.py``) is known with ``--skip-checks``
    too: which jobs a worker knows must not depend on whether the checks ran. A URLconf
    that cannot be imported is logged, not fatal (the web process fails on it)."""
    from django.conf import settings
    from django.urls import get_resolver

    if not getattr(settings, "ROOT_URLCONF", None):
        return
    try:
        get_resolver().url_patterns  # noqa: B018 - imports the URLconf and its views
    except Exception as exc:
        log.warning(
            "cannot import the URLconf %r (%s: %s): jobs that only its views import are "
            "unknown to this worker",
            settings.ROOT_URLCONF,
            type(exc).__name__,
            exc,
        )


def log_jobs() -> None:
    """The start-up banner's list of jobs and where they came from: a worker that knows
    no jobs (they live in tasks.py, or there is no jobs.py) says so before any run fails."""
    jobs = sorted(all_jobs().values(), key=lambda definition: definition.name)
    level = logging.INFO if jobs else logging.WARNING
    log.log(level, "%d job(s) registered; %s", len(jobs), where_jobs_come_from(advice=not jobs))
    for definition in jobs:
        log.info("  job %s", _describe(definition))
    if skipped := not_imported():
        log.log(level, "%s", skipped)


def _describe(definition: JobDefinition) -> str:
    """One job of the banner: its options as ``name=value``, then its flow control and
    schedules in the words of docs/how-to/flow-control.md (``concurrency 1 per
    customer``, ``throttle 10/1m per region``, ``cron "0 9 * * *"``)."""
    retries = conf.get("RETRIES") if definition.retries is None else definition.retries
    backoff = conf.get("BACKOFF") if definition.backoff is None else definition.backoff
    parts = [definition.name, f"queue={definition.queue}", f"retries={retries}"]
    parts.append(f"backoff={_duration_text(backoff)}")
    if definition.version != 1:
        parts.append(f"version={definition.version}")
    if definition.priority:
        parts.append(f"priority={definition.priority}")
    for option in ("timeout", "step_timeout", "on_event"):
        if (value := getattr(definition, option)) is not None:
            parts.append(f"{option}={_duration_text(value)}")
    return ", ".join([" ".join(parts), *flow_control(definition)])


def flow_control(definition: JobDefinition) -> list[str]:
    """A job's limits, gates, cancel and failure handlers, and schedules, in words."""
    limits = (definition.concurrency, definition.throttle, definition.rate_limit)
    words = [limit.describe() for limit in (*limits, definition.debounce) if limit is not None]
    words += [cancel.describe() for cancel in definition.cancel_on]
    if definition.on_failure is not None:
        words.append(f"on failure {definition.on_failure}")
    words += [cron.describe() for cron in definition.cron]
    return words


def _duration_text(value: object) -> str:
    if isinstance(value, timedelta):
        return format_duration(value)
    return getattr(value, "__qualname__", None) or str(value)  # a backoff callable: its name
