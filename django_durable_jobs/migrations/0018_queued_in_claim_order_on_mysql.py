"""On MariaDB and MySQL, queued runs indexed in the claim's order.

Without partial indexes, the claim's indexes lead with ``status`` and then the wake
time (``durable_run_runnable``, ``durable_run_runnable_all``), so that a claim reads
only due runs, not those sleeping for days; the few it reads are then sorted by
priority. Behind a backlog of 100,000 due queued runs, that sort took about 100 ms for
every claim. These two indexes hold runs by ``status``, (queue,) priority descending
and wake time: the claim reads queued runs through them, in its order, and stops after
the runs it wants (``models.best``). Sleeping and waiting runs are still read
through the wake time.

They exist on MariaDB and MySQL only, and are not in ``JobRun.Meta.indexes``: a
PostgreSQL or SQLite partial index serves the claim in its order already, and an index
declared there would be built (and kept up to date) on those databases too.
"""

from typing import Any

from django.db import migrations

#: name -> columns, ``-`` for descending (MariaDB before 10.8 builds it ascending).
INDEXES = {
    "durable_run_queued_order": ("status", "queue", "-priority", "wake_at"),
    "durable_run_queued_order_all": ("status", "-priority", "wake_at"),
}


def _table(apps: Any, schema_editor: Any) -> str:
    return str(
        schema_editor.quote_name(apps.get_model("django_durable_jobs", "JobRun")._meta.db_table)
    )


def create(apps: Any, schema_editor: Any) -> None:
    if schema_editor.connection.vendor != "mysql":
        return
    for name, fields in INDEXES.items():
        columns = ", ".join(
            schema_editor.quote_name(field.lstrip("-")) + (" DESC" if field.startswith("-") else "")
            for field in fields
        )
        schema_editor.execute(
            f"CREATE INDEX {schema_editor.quote_name(name)} ON {_table(apps, schema_editor)} ({columns})"
        )


def drop(apps: Any, schema_editor: Any) -> None:
    if schema_editor.connection.vendor != "mysql":
        return
    for name in INDEXES:
        schema_editor.execute(
            f"DROP INDEX {schema_editor.quote_name(name)} ON {_table(apps, schema_editor)}"
        )


class Migration(migrations.Migration):
    dependencies = [
        ("django_durable_jobs", "0017_concurrency_functions_batched"),
    ]

    operations = [migrations.RunPython(create, drop, atomic=False, elidable=False)]
