"""Events are ordered by commit, not by id (``Event.position``, ``EventPosition``).

Existing events keep their order: each gets its id as its position, and the next
position starts after the largest id, so the id cursors of steps already waiting
keep meaning what they meant.
"""

from typing import Any

from django.db import migrations, models
from django.db.models import F, Max


def position_existing(apps: Any, schema_editor: Any) -> None:
    using = schema_editor.connection.alias
    event = apps.get_model("django_durable_jobs", "Event")
    event.objects.using(using).update(position=F("id"))
    top = event.objects.using(using).aggregate(top=Max("id"))["top"] or 0
    apps.get_model("django_durable_jobs", "EventPosition").objects.using(using).create(
        pk=1, position=top
    )


class Migration(migrations.Migration):
    dependencies = [("django_durable_jobs", "0005_notify_woken_trigger")]

    operations = [
        migrations.CreateModel(
            name="EventPosition",
            fields=[
                (
                    "id",
                    models.PositiveSmallIntegerField(default=1, primary_key=True, serialize=False),
                ),
                ("position", models.BigIntegerField(default=0)),
            ],
            options={"verbose_name": "event position"},
        ),
        migrations.RemoveIndex(model_name="event", name="durable_event_lookup"),
        migrations.AddField(
            model_name="event",
            name="position",
            field=models.BigIntegerField(blank=True, null=True),
        ),
        migrations.AddIndex(
            model_name="event",
            index=models.Index(fields=["name", "key", "position"], name="durable_event_position"),
        ),
        migrations.RunPython(position_existing, migrations.RunPython.noop),
    ]
