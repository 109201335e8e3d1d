"""The SQL a reader wants to read, in files beside this module: ``sql/schema.sql`` (the
functions and triggers the migrations create) and ``sql/queries.sql`` (the claim and
the inserts). Each file is a list of sections, each starting with its name between
dashes (``-- durable_flow_lock --``) and comments saying what it does and why.

A change to ``schema.sql`` comes with a migration that calls ``create_schema`` again:
functions are created ``OR REPLACE`` and triggers dropped first, so loading the file
twice is harmless.
"""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path
from typing import Any

FOLDER = Path(__file__).with_name("sql")
_HEADER = re.compile(r"^-- (\w+) --$", re.MULTILINE)
_TRIGGER = re.compile(r"CREATE TRIGGER (\w+) .*? ON (\w+)", re.DOTALL)
_FUNCTION = re.compile(r"CREATE OR REPLACE FUNCTION (\w+\([^)]*\))")


@cache
def sections(name: str) -> dict[str, str]:
    """The statements of ``sql/<name>.sql`` by section name, in file order, each
    without its comments and trailing semicolon."""
    text = (FOLDER / f"{name}.sql").read_text()
    found: dict[str, str] = {}
    heads = list(_HEADER.finditer(text))
    for head, after in zip(heads, [*heads[1:], None], strict=True):
        body = text[head.end() : after.start() if after else len(text)]
        lines = [line for line in body.splitlines() if not line.startswith("--")]
        found[head.group(1)] = "\n".join(lines).strip().removesuffix(";")
    return found


def create_schema(schema_editor: Any) -> None:
    """Create (or replace) every function and trigger of ``schema.sql``."""
    for statement in sections("schema").values():
        if trigger := _TRIGGER.match(statement):
            name, table = trigger.groups()
            schema_editor.execute(f'DROP TRIGGER IF EXISTS {name} ON "{table}"')
        schema_editor.execute(statement)


def ensure_statistics(using: str) -> None:
    """After ``migrate``: the statistics object ``durable_run_queue_status`` on a
    database migrated before it was added to ``schema.sql``, gathered at once (one
    ANALYZE: a sample of the table, seconds at 10 million runs)."""
    from django.db import connections

    with connections[using].cursor() as cursor:
        cursor.execute(
            "SELECT 1 FROM pg_statistic_ext WHERE stxname = %s", ["durable_run_queue_status"]
        )
        if cursor.fetchone():
            return
        cursor.execute(sections("schema")["durable_run_queue_status"])
        cursor.execute("ANALYZE django_durable_jobs_jobrun")


def drop_schema(schema_editor: Any) -> None:
    """Drop what ``create_schema`` created, the triggers first."""
    statements = list(sections("schema").values())
    for statement in reversed(statements):
        if trigger := _TRIGGER.match(statement):
            name, table = trigger.groups()
            schema_editor.execute(f'DROP TRIGGER IF EXISTS {name} ON "{table}"')
        elif function := _FUNCTION.search(statement):
            schema_editor.execute(f"DROP FUNCTION IF EXISTS {function.group(1)}")


_OPTION = re.compile(r"^\s*(\w+)\s*=\s*([^,\s)]+)", re.MULTILINE)


def storage() -> dict[str, dict[str, str]]:
    """The storage parameters of ``sql/storage.sql``: table -> {parameter: value}."""
    return {
        table: dict(_OPTION.findall(statement.split("(", 1)[1]))
        for table, statement in sections("storage").items()
    }


def set_storage(schema_editor: Any) -> None:
    """Set the tables' storage parameters of ``storage.sql`` (autovacuum per table)."""
    for statement in sections("storage").values():
        schema_editor.execute(statement)


def reset_storage(schema_editor: Any) -> None:
    """Back to the server's defaults: each parameter ``set_storage`` set, reset."""
    for table, options in storage().items():
        schema_editor.execute(f'ALTER TABLE "{table}" RESET ({", ".join(options)})')
