"""On PostgreSQL, NOTIFY listening workers whenever a run becomes runnable now.

A published event, a finished child run, a retry without backoff, a released or
requeued run, an operator's retry or wake: each sets ``wake_at`` to now on a
runnable run. One row trigger covers them all, inside the same statement (no extra
round trip), delivered on commit; identical notifications of one transaction are
sent once.
"""

from typing import Any

from django.db import migrations

FUNCTION = """
CREATE OR REPLACE FUNCTION durable_jobs_notify_woken() RETURNS trigger AS $$
BEGIN
    PERFORM pg_notify('durable_jobs', 'woken');
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
        f"CREATE TRIGGER durable_jobs_woken AFTER UPDATE OF wake_at, status ON {table} "
        "FOR EACH ROW WHEN (NEW.status IN ('queued', 'sleeping', 'waiting') "
        "AND NEW.wake_at <= now()) EXECUTE FUNCTION durable_jobs_notify_woken()"
    )


def drop(apps: Any, schema_editor: Any) -> None:
    if schema_editor.connection.vendor != "postgresql":
        return
    table = schema_editor.quote_name(apps.get_model("django_durable_jobs", "JobRun")._meta.db_table)
    schema_editor.execute(f"DROP TRIGGER IF EXISTS durable_jobs_woken ON {table}")
    schema_editor.execute("DROP FUNCTION IF EXISTS durable_jobs_notify_woken()")


class Migration(migrations.Migration):
    dependencies = [("django_durable_jobs", "0004_step_kind_deadline")]
    operations = [migrations.RunPython(create, drop)]
