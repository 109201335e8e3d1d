"""An ``invoke`` step's child run gets a column of its own (``StepRecord.child``); until
now its id was kept in ``correlation_key``, the wait's event key."""

import uuid
from typing import Any

from django.db import migrations, models


def _move(apps: Any, schema_editor: Any, forward: bool) -> None:
    StepRecord = apps.get_model("django_durable_jobs", "StepRecord")
    steps = StepRecord.objects.using(schema_editor.connection.alias).filter(kind="invoke")
    if forward:
        for pk, key in steps.exclude(correlation_key=None).values_list("pk", "correlation_key"):
            try:
                child = uuid.UUID(key)
            except ValueError:
                continue  # not a run id: leave it where it is
            steps.filter(pk=pk).update(child=child, correlation_key=None)
    else:
        for pk, child in steps.exclude(child=None).values_list("pk", "child"):
            steps.filter(pk=pk).update(correlation_key=str(child), child=None)


def forwards(apps: Any, schema_editor: Any) -> None:
    _move(apps, schema_editor, forward=True)


def backwards(apps: Any, schema_editor: Any) -> None:
    _move(apps, schema_editor, forward=False)


class Migration(migrations.Migration):
    dependencies = [
        ("django_durable_jobs", "0012_step_last_started_at"),
    ]

    operations = [
        migrations.AddField(
            model_name="steprecord",
            name="child",
            field=models.UUIDField(blank=True, null=True),
        ),
        migrations.RunPython(forwards, backwards, elidable=True),
    ]
