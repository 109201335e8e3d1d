"""The benchmark's database: recreated at the start, emptied between workloads.

One ``recreate_db`` and one ``truncate`` for PostgreSQL, MariaDB and SQLite alike (the vendor
decides), so a workload written once runs on both (benchmarks/mariadb.py reuses ours).
"""

from __future__ import annotations

import importlib
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any


def pg_params(dbname: str) -> dict[str, Any]:
    """libpq parameters for ``dbname`` on the benchmark's PostgreSQL server."""
    from django.conf import settings

    db = settings.DATABASES["default"]
    return {"host": db["HOST"], "port": db["PORT"], "user": db["USER"], "dbname": dbname}


def recreate_db() -> None:
    """Drop and create the benchmark's database: every run starts from the same state.
    On MariaDB it gets the server's default character set and collation, as a user's
    database would."""
    from django.conf import settings
    from django.db import connections

    connections.close_all()
    db = settings.DATABASES["default"]
    name = db["NAME"]
    if "sqlite" in db["ENGINE"]:
        for path in (Path(name), Path(f"{name}-wal"), Path(f"{name}-shm")):
            path.unlink(missing_ok=True)
        Path(name).parent.mkdir(parents=True, exist_ok=True)
        return
    if "mysql" in db["ENGINE"]:
        driver = importlib.import_module("MySQLdb")  # mysqlclient, Django's MySQL driver
        conn = driver.connect(host=db["HOST"], port=db["PORT"], user=db["USER"])
        try:
            cursor = conn.cursor()
            cursor.execute(f"DROP DATABASE IF EXISTS `{name}`")
            cursor.execute(f"CREATE DATABASE `{name}`")
        finally:
            conn.close()
        return
    import psycopg

    with psycopg.connect(autocommit=True, **pg_params("postgres")) as pg:
        pg.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        pg.execute(f'CREATE DATABASE "{name}"')


def truncate() -> None:
    """Empty the runs, steps and events: the next workload starts on empty tables."""
    from django.db import connection

    from django_durable_jobs.models import Event, JobRun, Message, StepRecord

    models = (StepRecord, Event, Message, JobRun)
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            tables = ", ".join(m._meta.db_table for m in models)
            cursor.execute(f"TRUNCATE {tables} CASCADE")
            return
        if connection.vendor == "sqlite":
            for model in models:
                cursor.execute(f"DELETE FROM {connection.ops.quote_name(model._meta.db_table)}")
            return
        cursor.execute("SET FOREIGN_KEY_CHECKS = 0")
        for model in models:
            cursor.execute(f"TRUNCATE TABLE {connection.ops.quote_name(model._meta.db_table)}")
        cursor.execute("SET FOREIGN_KEY_CHECKS = 1")


def run_columns(values: dict[str, str]) -> tuple[list[str], list[str]]:
    """The runs table's columns (from the model) and the SQL for each, for an INSERT ...
    SELECT that generates runs (PostgreSQL): ``values`` where given, else the field's
    default when it is a plain value (a number, a string, a JSON list or object), else
    NULL for a nullable column (the flow-control, schedule and debounce columns: what
    ``enqueue`` writes for a plain run). A new NOT NULL column without such a default
    stops the benchmark until it gets a value here."""
    from django_durable_jobs.models import JobRun

    fields = JobRun._meta.concrete_fields
    sql = {str(f.column): values.get(str(f.column)) or _default_sql(f) for f in fields}
    missing = sorted(c for f in fields if sql[(c := str(f.column))] is None and not f.null)
    if missing:
        raise RuntimeError(f"no value for new NOT NULL column(s) {missing}")
    return list(sql), [value or "NULL" for value in sql.values()]


def _default_sql(field: Any) -> str | None:
    """``field``'s default as an SQL literal, if it is a plain value."""
    if not field.has_default():
        return None
    value = field.get_default()
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return "'" + value.replace("'", "''") + "'"
    if isinstance(value, list | dict):
        return "'" + json.dumps(value).replace("'", "''") + "'::jsonb"
    return None


def run_sql(sql: str, params: Sequence[Any] = ()) -> None:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(sql, params)


def scalar(sql: str, params: Sequence[Any] = ()) -> Any:
    """The first column of the first row, or None."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        row = cursor.fetchone()
    return None if row is None else row[0]
