from typing import Any

from django.apps import AppConfig
from django.db.backends.signals import connection_created


def _tune_sqlite(sender: Any, connection: Any, **kwargs: Any) -> None:
    """Let several worker processes share one SQLite file: WAL lets readers run beside
    the writer, and a busy timeout makes writers wait instead of failing."""
    from . import conf

    if connection.vendor == "sqlite" and connection.alias == conf.database():
        with connection.cursor() as cursor:
            cursor.execute("PRAGMA journal_mode=WAL")
            cursor.execute("PRAGMA busy_timeout=30000")


class DurableJobsConfig(AppConfig):
    name = "django_durable_jobs"
    verbose_name = "Durable jobs"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from . import backends, checks, clock, conf, migrated, registry
        from .dbclock import DatabaseClock

        del checks, migrated  # register the system checks on import
        # Leases and wake times are compared across processes: tell the database's time.
        clock.install(DatabaseClock())
        connection_created.connect(_tune_sqlite, dispatch_uid="django_durable_jobs.sqlite")
        if conf.get("AUTODISCOVER"):
            registry.autodiscover()
        # The jobs of django.tasks backends (Django >= 6.0; a no-op before): a worker
        # must know them although it never enqueues a task itself.
        backends.install()
