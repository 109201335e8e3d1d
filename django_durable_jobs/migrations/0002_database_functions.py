"""What the models cannot declare, per database.

PostgreSQL: the functions and triggers of ``db/postgresql/sql/schema.sql`` (the
NOTIFY triggers that wake idle workers, the flow-control functions that claim runs
under a concurrency limit in one call), and the hot tables' autovacuum settings of
``db/postgresql/sql/storage.sql``.

MariaDB and MySQL: queued runs indexed in the claim's order. Without partial indexes
the claim's indexes lead with ``status`` then the wake time, and the few due runs it
reads are sorted by priority: behind 100,000 due runs that sort took about 100 ms a
claim. These hold runs by status, (queue,) whether a run is under a concurrency limit,
priority descending and wake time, so the claim of runs under no limit reads its own
part in order and stops after the runs it wants (``models.best``); runs held back by a
saturated key (no wake time: MariaDB sorts NULL first) stay out of its way. Not in
``JobRun.Meta.indexes``: PostgreSQL's and SQLite's partial indexes serve the claim in
its order already, and an index declared there would be built on them too. And the
doorbell (``db/doorbell.py``) in a MEMORY table: a ring is an UPDATE in a statement of
its own after each enqueue's commit, which InnoDB makes durable (a log flush, 2.5 ms
here) and a MEMORY table does not (0.04 ms); after a restart the next ring makes the
row again.
"""

from typing import Any

from django.db import migrations

from django_durable_jobs.db.postgresql import sql

#: name -> columns, ``-`` for descending (MariaDB before 10.8 builds it ascending).
MYSQL_INDEXES = {
    "durable_run_unlimited_order": ("status", "queue", "concurrency_limit", "-priority", "wake_at"),
    "durable_run_unlimited_order_all": ("status", "concurrency_limit", "-priority", "wake_at"),
}


def _table(apps: Any, schema_editor: Any) -> str:
    return str(
        schema_editor.quote_name(apps.get_model("django_durable_jobs", "JobRun")._meta.db_table)
    )


def _doorbell(apps: Any, schema_editor: Any) -> str:
    model = apps.get_model("django_durable_jobs", "Doorbell")
    return str(schema_editor.quote_name(model._meta.db_table))


def forwards(apps: Any, schema_editor: Any) -> None:
    vendor = schema_editor.connection.vendor
    if vendor == "postgresql":
        sql.create_schema(schema_editor)
        sql.set_storage(schema_editor)
    elif vendor == "mysql":
        schema_editor.execute(f"ALTER TABLE {_doorbell(apps, schema_editor)} ENGINE=MEMORY")
        for name, fields in MYSQL_INDEXES.items():
            columns = ", ".join(
                schema_editor.quote_name(field.lstrip("-"))
                + (" DESC" if field.startswith("-") else "")
                for field in fields
            )
            schema_editor.execute(
                f"CREATE INDEX {schema_editor.quote_name(name)} "
                f"ON {_table(apps, schema_editor)} ({columns})"
            )


def backwards(apps: Any, schema_editor: Any) -> None:
    vendor = schema_editor.connection.vendor
    if vendor == "postgresql":
        sql.reset_storage(schema_editor)
        sql.drop_schema(schema_editor)
    elif vendor == "mysql":
        schema_editor.execute(f"ALTER TABLE {_doorbell(apps, schema_editor)} ENGINE=InnoDB")
        for name in MYSQL_INDEXES:
            schema_editor.execute(
                f"DROP INDEX {schema_editor.quote_name(name)} ON {_table(apps, schema_editor)}"
            )


class Migration(migrations.Migration):
    dependencies = [("django_durable_jobs", "0001_initial")]

    operations = [migrations.RunPython(forwards, backwards, atomic=False, elidable=False)]
