"""Schedule.code_key compares exactly and fits MariaDB's unique index (255 characters)."""

from __future__ import annotations

import hashlib
from typing import Any

from django.db import migrations

import django_durable_jobs.schema


def shorten_long_keys(apps: Any, schema_editor: Any) -> None:
    """Keys longer than the new column end in their hash, as ``schedules.code_key`` writes
    them (copied here: a migration must not change when the app's code does)."""
    schedule = apps.get_model("django_durable_jobs", "Schedule")
    using = schema_editor.connection.alias
    for row in schedule.objects.using(using).exclude(code_key=None).only("pk", "code_key"):
        if len(row.code_key) > 255:
            digest = (
                "|sha256:"
                + hashlib.sha256(row.code_key.encode("utf-8", "surrogatepass")).hexdigest()
            )
            row.code_key = row.code_key[: 255 - len(digest)] + digest
            row.save(update_fields=["code_key"])


class Migration(migrations.Migration):
    dependencies = [("django_durable_jobs", "0010_flow_control")]

    operations = [
        migrations.RunPython(shorten_long_keys, migrations.RunPython.noop),
        migrations.AlterField(
            model_name="schedule",
            name="code_key",
            field=django_durable_jobs.schema.ExactCharField(
                blank=True, editable=False, max_length=255, null=True, unique=True
            ),
        ),
    ]
