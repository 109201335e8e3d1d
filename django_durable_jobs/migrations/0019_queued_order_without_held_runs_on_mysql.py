"""On MariaDB and MySQL, the queued runs' claim-order indexes of 0018 split by whether
a run is under a concurrency limit.

Runs held back by a saturated concurrency key are queued with no wake time, and
MariaDB and MySQL sort NULL first: in 0018's indexes (status, [queue,] priority
descending, wake time) a key's held backlog stood ahead of every due run of its
priority, so every claim read through all of it (61 ms a claim behind 50,000 held
runs). With ``concurrency_limit`` after the status, the claim of runs under no limit
reads its own part of the index, in order, and the flow claim reads limited runs
through the wake time (a range that leaves the held ones out); ``models.best`` asks
for the two parts apart.

Like 0018's, these exist on MariaDB and MySQL only. Created only where missing, and
0018's dropped only where present: a migration re-run after a partial one (MySQL's
DDL does not roll back) does not stop at a duplicate index.
"""

from typing import Any

from django.db import migrations

#: name -> columns, ``-`` for descending (MariaDB before 10.8 builds it ascending).
INDEXES = {
    "durable_run_unlimited_order": ("status", "queue", "concurrency_limit", "-priority", "wake_at"),
    "durable_run_unlimited_order_all": ("status", "concurrency_limit", "-priority", "wake_at"),
}
#: 0018's, replaced.
REPLACED = {
    "durable_run_queued_order": ("status", "queue", "-priority", "wake_at"),
    "durable_run_queued_order_all": ("status", "-priority", "wake_at"),
}


def _table(apps: Any, schema_editor: Any) -> str:
    return str(apps.get_model("django_durable_jobs", "JobRun")._meta.db_table)


def _existing(schema_editor: Any, table: str) -> set[str]:
    connection = schema_editor.connection
    with connection.cursor() as cursor:
        return set(connection.introspection.get_constraints(cursor, table))


def _create(schema_editor: Any, table: str, indexes: dict[str, tuple[str, ...]]) -> None:
    existing = _existing(schema_editor, table)
    for name, fields in indexes.items():
        if name in existing:
            continue
        columns = ", ".join(
            schema_editor.quote_name(field.lstrip("-")) + (" DESC" if field.startswith("-") else "")
            for field in fields
        )
        schema_editor.execute(
            f"CREATE INDEX {schema_editor.quote_name(name)} "
            f"ON {schema_editor.quote_name(table)} ({columns})"
        )


def _drop(schema_editor: Any, table: str, names: list[str]) -> None:
    existing = _existing(schema_editor, table)
    for name in names:
        if name in existing:
            schema_editor.execute(
                f"DROP INDEX {schema_editor.quote_name(name)} ON {schema_editor.quote_name(table)}"
            )


def _swap(
    apps: Any, schema_editor: Any, new: dict[str, tuple[str, ...]], old: dict[str, tuple[str, ...]]
) -> None:
    """``new`` created, then ``old`` dropped (MariaDB and MySQL only)."""
    if schema_editor.connection.vendor != "mysql":
        return
    table = _table(apps, schema_editor)
    _create(schema_editor, table, new)
    _drop(schema_editor, table, list(old))


def forwards(apps: Any, schema_editor: Any) -> None:
    _swap(apps, schema_editor, INDEXES, REPLACED)


def backwards(apps: Any, schema_editor: Any) -> None:
    _swap(apps, schema_editor, REPLACED, INDEXES)


class Migration(migrations.Migration):
    dependencies = [
        ("django_durable_jobs", "0018_queued_in_claim_order_on_mysql"),
    ]

    operations = [migrations.RunPython(forwards, backwards, atomic=False, elidable=False)]
