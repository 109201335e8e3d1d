from typing import Any

from django.apps import AppConfig
from django.db.backends.signals import connection_created
from django.db.models.signals import post_migrate


def _tune_connection(sender: Any, connection: Any, **kwargs: Any) -> None:
    """Prepare each new connection to the jobs database (``Dialect.on_connect``: on
    SQLite, WAL and a busy timeout, so several worker processes share one file)."""
    from . import conf
    from .db import dialect

    if connection.alias == conf.database():
        dialect.of(connection.alias).on_connect(connection)


def _sync_schedules(sender: Any, using: str = "default", **kwargs: Any) -> None:
    """After ``migrate``: the schedules declared in code appear as rows at once.

    Not after a partial ``migrate`` (to an older migration of this app, or of another
    app before this one's): the schedules table may not exist yet."""
    from . import conf
    from .db import migrated
    from .engine import clock
    from .verbs import schedules

    if using == conf.database() and not migrated.unapplied_migrations(using):
        schedules.sync(clock.current().now())


def _gather_statistics(sender: Any, using: str = "default", **kwargs: Any) -> None:
    """After ``migrate`` on PostgreSQL: the planner's statistics that the operators'
    estimates read (``db/postgresql/sql.py``, ``ensure_statistics``), on a database
    migrated before they existed too."""
    from . import conf
    from .db import dialect, migrated
    from .db.postgresql import sql

    if (
        using == conf.database()
        and dialect.of(using).estimates
        and not migrated.unapplied_migrations(using)
    ):
        sql.ensure_statistics(using)


class DurableJobsConfig(AppConfig):
    name = "django_durable_jobs"
    verbose_name = "Durable jobs"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from . import checks, conf
        from .contrib import task_signals
        from .contrib import tasks as backends
        from .db import migrated
        from .db.dbclock import DatabaseClock
        from .definitions import discovery
        from .engine import clock
        from .verbs import retention

        del checks, migrated  # register the system checks on import
        # Leases and wake times are compared across processes: tell the database's time.
        clock.install(DatabaseClock())
        connection_created.connect(_tune_connection, dispatch_uid="django_durable_jobs.sqlite")
        post_migrate.connect(_sync_schedules, sender=self, dispatch_uid="django_durable_jobs.cron")
        post_migrate.connect(
            _gather_statistics, sender=self, dispatch_uid="django_durable_jobs.statistics"
        )
        if conf.get("AUTODISCOVER"):
            discovery.autodiscover()
        retention.install()  # DURABLE_JOBS["RETENTION"]: an hourly purge schedule
        # The jobs of django.tasks backends (Django >= 6.0; a no-op before): a worker
        # must know them although it never enqueues a task itself.
        backends.install()
        if backends.HAS_TASKS:  # django.tasks' own signals, for the runs of its tasks
            task_signals.connect()

    # -- JobRun.wait and await_result (models stay below the verbs) -------------------
    def wait(self, run: Any, timeout: Any) -> Any:
        from .verbs import results

        return results.wait(run, timeout)

    async def await_result(self, run: Any, timeout: Any) -> Any:
        from .verbs import results

        return await results.await_result(run, timeout)
