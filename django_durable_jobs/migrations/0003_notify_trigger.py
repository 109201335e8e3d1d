"""On PostgreSQL, NOTIFY listening workers when runs are inserted.

A statement-level trigger costs enqueue no extra round trip, fires once per
INSERT statement (a bulk enqueue sends one notification), and like every NOTIFY
is delivered only when the transaction commits.
"""

from typing import Any

from django.db import migrations

FUNCTION = """
CREATE OR REPLACE FUNCTION durable_jobs_notify_enqueued() RETURNS trigger AS $$
BEGIN
    PERFORM pg_notify('durable_jobs', 'enqueued');
    RETURN NULL;
END
$$ LANGUAGE plpgsql
"""


def create(apps: Any, schema_editor: Any) -> None:
    if schema_editor.connection.vendor != "postgresql":
        return
    table = schema_editor.quote_name(apps.get_model("django_durable_jobs", "JobRun")._meta.db_table)
    schema_editor.execute(FUNCTION)
    schema_editor.execute(
        f"CREATE TRIGGER durable_jobs_enqueued AFTER INSERT ON {table} "
        "FOR EACH STATEMENT EXECUTE FUNCTION durable_jobs_notify_enqueued()"
    )


def drop(apps: Any, schema_editor: Any) -> None:
    if schema_editor.connection.vendor != "postgresql":
        return
    table = schema_editor.quote_name(apps.get_model("django_durable_jobs", "JobRun")._meta.db_table)
    schema_editor.execute(f"DROP TRIGGER IF EXISTS durable_jobs_enqueued ON {table}")
    schema_editor.execute("DROP FUNCTION IF EXISTS durable_jobs_notify_enqueued()")


class Migration(migrations.Migration):
    dependencies = [("django_durable_jobs", "0002_runnable_all_queues")]
    operations = [migrations.RunPython(create, drop)]
