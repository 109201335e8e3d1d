"""Whether this app's tables exist: the first thing a new project forgets (``migrate``).

``runjobs`` refuses to start on a database without them, a system check (database
tag: ``manage.py check --database default``) warns, and enqueue / publish on such a
database raise ``NotMigrated`` saying what to run instead of a bare "no such table".
"""

from __future__ import annotations

import functools
import re
import sys
from collections.abc import Callable
from types import FrameType
from typing import Any, ParamSpec, TypeVar

from django.core.checks import CheckMessage, Tags, register
from django.core.checks import Warning as CheckWarning
from django.core.management.commands.migrate import Command as MigrateCommand
from django.db import DatabaseError, connections
from django.db.migrations.executor import MigrationExecutor

from .. import conf
from ..exceptions import DurableJobsError

APP = "django_durable_jobs"
MIGRATE = "run `python manage.py migrate`"
# SQLite "no such table: x", PostgreSQL 'relation "x" does not exist' (not 'column "c"
# of relation "x" does not exist': the table is there, a column is missing),
# MariaDB/MySQL "Table 'db.x' doesn't exist".
_MISSING = re.compile(
    r"no such table: (?P<a>django_durable_jobs_\w+)"
    r"|(?<!of )relation \"(?P<b>django_durable_jobs_\w+)\" does not exist"
    r"|Table '(?:[^'.]+\.)?(?P<c>django_durable_jobs_\w+)' doesn't exist"
)

# The schema older than the code: a column it names is missing (SQLite "no such
# column: t.c" and "table t has no column named c", PostgreSQL 'column t.c does not
# exist' and 'column "c" of relation "t" does not exist', MariaDB/MySQL "Unknown
# column 'c'", which names no table), or one of this app's PostgreSQL functions.
_BEHIND = re.compile(
    r"no such column: |has no column named |column \S+ (?:of relation \S+ )?does not exist"
    r"|Unknown column '|function durable_\w+\(.*\) does not exist"
)

P = ParamSpec("P")
R = TypeVar("R")


class NotMigrated(DurableJobsError, DatabaseError):
    """This app's tables are missing on the jobs database: ``manage.py migrate`` was not
    run. Also a ``DatabaseError``, which is what it replaces."""

    code = "X_NOT_MIGRATED"
    retryable = False


def unapplied_migrations(using: str) -> list[str]:
    """Names of this app's migrations not applied on database ``using``, in order."""
    connection = connections[using]
    executor = MigrationExecutor(connection)
    targets = executor.loader.graph.leaf_nodes(APP)
    plan = executor.migration_plan(targets)
    return [migration.name for migration, backwards in plan if migration.app_label == APP]


def missing_table(exc: BaseException) -> str | None:
    """The table of this app that ``exc`` says does not exist, if that is what it says."""
    found = _MISSING.search(str(exc))
    return next(name for name in found.groups() if name) if found else None


def unapplied_message(using: str, missing: list[str]) -> str:
    """What ``runjobs`` and ``jobs`` say about this app's ``missing`` migrations."""
    return (
        f"{APP} has {len(missing)} unapplied migration(s) on database {using!r} "
        f"({', '.join(missing)}): {MIGRATE}"
    )


def needs_tables(function: Callable[P, R]) -> Callable[P, R]:
    """Turn "no such table: django_durable_jobs_…" into ``NotMigrated`` saying what to do;
    and "no such column", when this app's migrations are not all applied (its tables
    are there, migrated to an older release), into one naming those migrations."""

    @functools.wraps(function)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return function(*args, **kwargs)
        except DatabaseError as exc:
            if isinstance(exc, NotMigrated):
                raise
            table = missing_table(exc)
            if table is not None:
                raise NotMigrated(
                    f"the table {table} does not exist on database {conf.database()!r}: "
                    f"{MIGRATE} (django_durable_jobs is installed but not migrated)"
                ) from exc
            missing = _unapplied_behind(exc)
            if not missing:
                raise
            raise NotMigrated(unapplied_message(conf.database(), missing)) from exc

    return wrapper


def schema_behind(exc: BaseException) -> bool:
    """Whether ``exc`` says a column (or one of this app's functions) is missing."""
    return _BEHIND.search(str(exc)) is not None


def _unapplied_behind(exc: BaseException) -> list[str]:
    """This app's unapplied migrations, when ``exc`` says the schema is older than the
    code; [] otherwise. The migrations are looked up only then (they are read from
    disk), and not where the failed statement left the transaction unusable (a
    PostgreSQL transaction the caller opened): the caller gets the original error."""
    if not schema_behind(exc):
        return []
    try:
        return unapplied_migrations(conf.database())
    except DatabaseError:
        return []


#: The aliases this process has seen every table of this app on (tables do not go
#: away under a running project: once is enough).
_HAVE_TABLES: set[str] = set()


def has_tables(using: str) -> bool:
    """Whether every table of this app is on database ``using``: one look at its list
    of tables until they are, none after.

    >>> has_tables("default")  # doctest: +SKIP
    True
    """
    if using in _HAVE_TABLES:
        return True
    from django.apps import apps

    models = apps.get_app_config(APP).get_models()
    wanted = {model._meta.db_table for model in models if model._meta.managed}
    if wanted <= set(connections[using].introspection.table_names()):
        _HAVE_TABLES.add(using)
        return True
    return False


def running_migrate() -> bool:
    """Whether these checks run as ``migrate``'s own pre-checks.

    ``migrate`` runs every system check with ``databases=[its alias]``, and Django tells
    a check nothing else about who asked (no tag or flag excludes one check from one
    command). Telling a user who is running ``migrate`` to run ``migrate`` is noise, so
    look up the stack for the command itself (subclasses included; ``call_command`` too).
    """
    frame: FrameType | None = sys._getframe(1)
    while frame is not None:
        if isinstance(frame.f_locals.get("self"), MigrateCommand):
            return True
        frame = frame.f_back
    return False


@register(Tags.database)
def check_migrated(databases: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """W030 when the jobs database lacks this app's migrations (``check --database``;
    not from ``migrate``'s own pre-checks, which would tell it to run itself)."""
    using = conf.database()
    if not databases or using not in databases or running_migrate():
        return []
    try:
        missing = unapplied_migrations(using)
    except DatabaseError:
        return []  # unreachable: other checks and the first query say so
    if not missing:
        return []
    return [
        CheckWarning(
            f"django_durable_jobs has {len(missing)} unapplied migration(s) on database "
            f"{using!r}: {', '.join(missing)}",
            hint=f"{MIGRATE}; runjobs refuses to start until then.",
            id="django_durable_jobs.W030",
        )
    ]
