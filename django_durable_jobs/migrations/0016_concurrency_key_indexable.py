"""The concurrency functions of 0014 find a key's runs through an index.

0014 compared a run's key with ``IS NOT DISTINCT FROM`` (the key is NULL under a
limit without a key), which no index serves: each claim's "best run of this key" read
every runnable limited run of the job (``Rows Removed by Filter: 9999`` behind 10,000
distinct keys, 1.7 ms a claim, so the limited claim slowed down as the backlog grew).
``= key OR (key IS NULL AND column IS NULL)`` says the same and is served by
``durable_run_concurrency`` in a custom plan (the key is known: one index scan) and in
a generic one (a BitmapOr of two index scans). The functions are otherwise 0014's.
"""

import importlib
import re
from typing import Any

from django.db import migrations

functions = importlib.import_module("django_durable_jobs.migrations.0014_concurrency_functions")

#: ``[r.]concurrency_key IS NOT DISTINCT FROM cand.concurrency_key`` (or ``run.``).
_NOT_DISTINCT = re.compile(
    r"(?P<column>\b(?:r\.)?concurrency_key) IS NOT DISTINCT FROM (?P<key>(?:cand|run)\.concurrency_key)"
)


def indexable(sql: str) -> str:
    """0014's function text with every key comparison in a form an index serves."""
    rewritten = _NOT_DISTINCT.sub(
        lambda m: f"({m['column']} = {m['key']} OR ({m['key']} IS NULL AND {m['column']} IS NULL))",
        sql,
    )
    assert "IS NOT DISTINCT FROM" not in rewritten
    return rewritten


def _create(schema_editor: Any, apps: Any, rewrite: Any) -> None:
    if schema_editor.connection.vendor != "postgresql":
        return
    quote = schema_editor.quote_name
    runs = quote(apps.get_model("django_durable_jobs", "JobRun")._meta.db_table)
    keys = quote(apps.get_model("django_durable_jobs", "FlowKey")._meta.db_table)
    for function in (functions.FINISH, functions.CLAIM):
        schema_editor.execute(rewrite(function).replace("{runs}", runs).replace("{keys}", keys))


def forwards(apps: Any, schema_editor: Any) -> None:
    _create(schema_editor, apps, indexable)


def backwards(apps: Any, schema_editor: Any) -> None:
    _create(schema_editor, apps, lambda sql: sql)


class Migration(migrations.Migration):
    dependencies = [("django_durable_jobs", "0015_limited_index_without_held")]
    operations = [migrations.RunPython(forwards, backwards)]
