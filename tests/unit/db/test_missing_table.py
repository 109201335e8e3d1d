"""``db.migrated.missing_table`` reads "this app's table does not exist" in each
database's own words: the texts below are what SQLite, PostgreSQL (psycopg 3) and
MariaDB (mysqlclient) said to a query on a database without this app's tables, or
with a table that lacks a column."""

from __future__ import annotations

import pytest
from django.db import OperationalError, ProgrammingError

from django_durable_jobs.db.migrated import missing_table, schema_behind

SQLITE = "no such table: django_durable_jobs_jobrun"
POSTGRESQL = (
    'relation "django_durable_jobs_jobrun" does not exist\n'
    'LINE 1: SELECT "id" FROM "django_durable_jobs_jobrun" WHERE "status"...\n'
    "                         ^"
)
MARIADB = "(1146, \"Table 'gaps_ops.django_durable_jobs_event' doesn't exist\")"


@pytest.mark.parametrize(
    ("error", "table"),
    [
        (OperationalError(SQLITE), "django_durable_jobs_jobrun"),
        (ProgrammingError(POSTGRESQL), "django_durable_jobs_jobrun"),
        # mysqlclient's exception carries (code, message); str() is the tuple's.
        (ProgrammingError(1146, "Table 'gaps_ops.django_durable_jobs_event' doesn't exist"),
         "django_durable_jobs_event"),
        (ProgrammingError(MARIADB), "django_durable_jobs_event"),
    ],
)  # fmt: skip
def test_each_databases_missing_table_text_names_the_table(error: Exception, table: str) -> None:
    assert missing_table(error) == table


@pytest.mark.parametrize(
    "text",
    [
        "no such table: shop_order",  # the project's own table: not ours to explain
        'relation "shop_order" does not exist',
        "(1146, \"Table 'gaps_ops.shop_order' doesn't exist\")",
        # A column missing (a migration of a later release not applied): the table is
        # there, so "the table does not exist" would mislead.
        'column "wake_at" of relation "django_durable_jobs_jobrun" does not exist\n'
        "LINE 1: UPDATE django_durable_jobs_jobrun SET wake_at = now()\n"
        "                                              ^",
        'column "wake_at" does not exist\nLINE 1: SELECT wake_at FROM django_durable_jobs_jobrun',
        "(1054, \"Unknown column 'wake_at' in 'INSERT INTO'\")",
    ],
)
def test_other_errors_are_not_a_missing_table_of_this_app(text: str) -> None:
    assert missing_table(ProgrammingError(text)) is None


@pytest.mark.parametrize(
    "error",
    [
        # What each database said to `jobs list` and `jobs publish` on this app's tables
        # migrated to an older release: SQLite, PostgreSQL (psycopg 3), MariaDB.
        OperationalError("no such column: django_durable_jobs_jobrun.schedule_id"),
        OperationalError("table django_durable_jobs_event has no column named position"),
        ProgrammingError(
            "column django_durable_jobs_jobrun.schedule_id does not exist\n"
            'LINE 1: ...es_at", "django_durable_jobs_jobrun"."parent_id", "django_du...'
        ),
        ProgrammingError(
            'column "position" of relation "django_durable_jobs_event" does not exist\n'
            'LINE 1: ...event" ("name", "key", "payload", "published_at", "position"...'
        ),
        OperationalError(
            1054, "Unknown column 'django_durable_jobs_jobrun.schedule_id' in 'SELECT'"
        ),
        OperationalError(1054, "Unknown column 'position' in 'INSERT INTO'"),
        ProgrammingError("function durable_flow_lock(text, text, text) does not exist"),
    ],
)
def test_each_databases_missing_column_text_says_the_schema_is_behind(error: Exception) -> None:
    assert schema_behind(error)


@pytest.mark.parametrize(
    "text",
    [
        SQLITE,  # a missing table has its own message
        "(1213, 'Deadlock found when trying to get lock; try restarting transaction')",
        'duplicate key value violates unique constraint "durable_run_idempotency_key"',
        "function shop_total(integer) does not exist",  # not one of this app's
    ],
)
def test_other_errors_do_not_say_the_schema_is_behind(text: str) -> None:
    assert not schema_behind(ProgrammingError(text))
