"""``IdempotencyKey``: the idempotency keys a run answers to besides its own, those of
the enqueues a ``Debounce`` joined to it (``gates.save_gated``)."""

import django.db.models.deletion
from django.db import migrations, models

import django_durable_jobs.db.schema


class Migration(migrations.Migration):
    dependencies = [
        ("django_durable_jobs", "0019_queued_order_without_held_runs_on_mysql"),
    ]

    operations = [
        migrations.CreateModel(
            name="IdempotencyKey",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("job_name", django_durable_jobs.db.schema.ExactCharField(max_length=200)),
                ("key", django_durable_jobs.db.schema.ExactCharField(max_length=255)),
                (
                    "run",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="joined_keys",
                        to="django_durable_jobs.jobrun",
                    ),
                ),
            ],
            options={
                "verbose_name": "idempotency key",
                "constraints": [
                    models.UniqueConstraint(fields=("job_name", "key"), name="durable_joined_key")
                ],
            },
        ),
    ]
