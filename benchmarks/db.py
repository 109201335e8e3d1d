"""The benchmark's database: recreated at the start, emptied between workloads.

One ``recreate_db`` and one ``truncate`` for PostgreSQL, MariaDB and SQLite alike (the vendor
decides), so a workload written once runs on both (benchmarks/mariadb.py reuses ours).
"""

from __future__ import annotations

import importlib
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
    SELECT that generates runs: ``values`` where given, NULL for any other nullable
    column (the flow-control, schedule and debounce columns: what ``enqueue`` writes for
    a plain run). A new NOT NULL column stops the benchmark until it gets a value here."""
    from django_durable_jobs.models import JobRun

    fields = JobRun._meta.concrete_fields
    columns = [str(f.column) for f in fields]
    missing = sorted(str(f.column) for f in fields if f.column not in values and not f.null)
    if missing:
        raise RuntimeError(f"no value for new NOT NULL column(s) {missing}")
    return columns, [values.get(column, "NULL") for column in columns]


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
