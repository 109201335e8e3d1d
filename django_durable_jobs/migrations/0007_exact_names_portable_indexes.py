"""Exact names and keys, and partial indexes that exist on MariaDB and MySQL too.

Only MariaDB and MySQL change: there, names and keys get a binary, no-pad collation
(``schema.ExactCharField``) and the five partial indexes, built until now without
their condition, are rebuilt to lead with ``status`` (``schema.PartialIndex``).
PostgreSQL and SQLite already compare exactly and already have these partial indexes
(the same SQL): rebuilding them would only lock the tables, so their schema is left
as it is and only Django's record of the models changes.
"""

from typing import Any

from django.db import migrations, models

import django_durable_jobs.schema

RUNNABLE = ("queued", "sleeping", "waiting")


class OnMySQLOnly(migrations.SeparateDatabaseAndState):
    """``operations`` change the models everywhere and the schema on MariaDB/MySQL only."""

    def __init__(self, operations: list[Any]) -> None:
        super().__init__(database_operations=operations, state_operations=operations)

    def database_forwards(self, app_label: str, schema_editor: Any, *args: Any) -> None:
        if schema_editor.connection.vendor == "mysql":
            super().database_forwards(app_label, schema_editor, *args)

    def database_backwards(self, app_label: str, schema_editor: Any, *args: Any) -> None:
        if schema_editor.connection.vendor == "mysql":
            super().database_backwards(app_label, schema_editor, *args)


def exact(**kwargs: Any) -> Any:
    return django_durable_jobs.schema.ExactCharField(**kwargs)


def partial(fields: list[str], name: str, where: models.Q, elsewhere: tuple[str, ...]) -> Any:
    return django_durable_jobs.schema.PartialIndex(
        fields=fields, name=name, where=where, elsewhere=elsewhere
    )


class Migration(migrations.Migration):
    dependencies = [
        ("django_durable_jobs", "0006_event_position"),
    ]

    operations = [
        OnMySQLOnly(
            [
                migrations.RemoveIndex(model_name="jobrun", name="durable_run_runnable"),
                migrations.RemoveIndex(model_name="jobrun", name="durable_run_lease"),
                migrations.RemoveIndex(model_name="jobrun", name="durable_run_runnable_all"),
                migrations.RemoveIndex(model_name="steprecord", name="durable_step_waiting"),
                migrations.RemoveIndex(model_name="steprecord", name="durable_step_event_done"),
                migrations.AlterField(
                    model_name="event",
                    name="key",
                    field=exact(blank=True, max_length=255, null=True),
                ),
                migrations.AlterField(model_name="event", name="name", field=exact(max_length=200)),
                migrations.AlterField(
                    model_name="jobrun",
                    name="idempotency_key",
                    field=exact(blank=True, max_length=255, null=True),
                ),
                migrations.AlterField(
                    model_name="jobrun", name="job_name", field=exact(max_length=200)
                ),
                migrations.AlterField(
                    model_name="jobrun",
                    name="lease_owner",
                    field=exact(blank=True, default="", max_length=200),
                ),
                migrations.AlterField(
                    model_name="jobrun",
                    name="queue",
                    field=exact(default="default", max_length=100),
                ),
                migrations.AlterField(
                    model_name="steprecord",
                    name="correlation_key",
                    field=exact(blank=True, max_length=255, null=True),
                ),
                migrations.AlterField(
                    model_name="steprecord",
                    name="event",
                    field=exact(blank=True, default="", max_length=200),
                ),
                migrations.AlterField(
                    model_name="steprecord", name="name", field=exact(max_length=200)
                ),
                migrations.AddIndex(
                    model_name="jobrun",
                    index=partial(
                        ["queue", "-priority", "wake_at"],
                        "durable_run_runnable",
                        models.Q(status__in=RUNNABLE),
                        ("status", "queue", "wake_at", "priority"),
                    ),
                ),
                migrations.AddIndex(
                    model_name="jobrun",
                    index=partial(
                        ["-priority", "wake_at"],
                        "durable_run_runnable_all",
                        models.Q(status__in=RUNNABLE),
                        ("status", "wake_at", "priority"),
                    ),
                ),
                migrations.AddIndex(
                    model_name="jobrun",
                    index=partial(
                        ["lease_expires_at"],
                        "durable_run_lease",
                        models.Q(status="running"),
                        ("status", "lease_expires_at"),
                    ),
                ),
                migrations.AddIndex(
                    model_name="steprecord",
                    index=partial(
                        ["event", "correlation_key"],
                        "durable_step_waiting",
                        models.Q(status="waiting"),
                        ("status", "event", "correlation_key"),
                    ),
                ),
                migrations.AddIndex(
                    model_name="steprecord",
                    index=partial(
                        ["event", "event_cursor"],
                        "durable_step_event_done",
                        models.Q(status="completed") & ~models.Q(event=""),
                        ("status", "event", "event_cursor"),
                    ),
                ),
            ]
        ),
    ]
