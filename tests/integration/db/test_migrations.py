"""The schema the migrations build: what the models say (``makemigrations --check``), and
on PostgreSQL the functions and triggers of ``db/postgresql/sql/schema.sql``, as written
there. The test database itself is an empty database migrated, on every database."""

from __future__ import annotations

import re

import pytest
from django.core.management import call_command
from django.db import connection

from django_durable_jobs.db.postgresql import sql

pytestmark = pytest.mark.django_db


@pytest.mark.django_db(databases=["default", "jobs", "other"])  # each alias's history
def test_the_models_need_no_new_migration() -> None:
    call_command("makemigrations", "django_durable_jobs", "--check", "--dry-run", verbosity=0)


def test_the_app_has_at_most_two_migrations() -> None:
    from django.db.migrations.loader import MigrationLoader

    ours = [
        name for app, name in MigrationLoader(None).disk_migrations if app == "django_durable_jobs"
    ]
    assert sorted(ours) == ["0001_initial", "0002_database_functions"]


def _functions() -> dict[str, str]:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT p.proname, pg_get_functiondef(p.oid) FROM pg_proc p "
            "JOIN pg_namespace n ON n.oid = p.pronamespace "
            "WHERE n.nspname = current_schema() AND p.proname LIKE 'durable%%'"
        )
        return {name: re.sub(r"\b\w+\.(durable\w+\()", r"\1", text) for name, text in cursor}


@pytest.mark.postgres(reason="functions and triggers exist on PostgreSQL only")
def test_the_migrated_functions_equal_the_schema_file() -> None:
    written = {
        name: statement
        for name, statement in sql.sections("schema").items()
        if statement.startswith("CREATE OR REPLACE FUNCTION")
    }
    migrated = _functions()
    assert sorted(migrated) == sorted(written)
    for name, statement in written.items():
        assert migrated[name].strip() == statement.strip(), name


@pytest.mark.postgres(reason="functions and triggers exist on PostgreSQL only")
def test_the_migrated_triggers_are_the_schema_files() -> None:
    written = {
        name: statement
        for name, statement in sql.sections("schema").items()
        if statement.startswith("CREATE TRIGGER")
    }
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT t.tgname, p.proname, c.relname FROM pg_trigger t "
            "JOIN pg_proc p ON p.oid = t.tgfoid JOIN pg_class c ON c.oid = t.tgrelid "
            "WHERE NOT t.tgisinternal AND t.tgname LIKE 'durable%%'"
        )
        migrated = {name: (function, table) for name, function, table in cursor}
    assert sorted(migrated) == sorted(written)
    for name, statement in written.items():
        function, table = migrated[name]
        assert f"ON {table}" in statement and f"EXECUTE FUNCTION {function}()" in statement


def test_the_schema_file_is_one_statement_a_section() -> None:
    sections = sql.sections("schema")
    assert len(sections) == 14
    for name, statement in sections.items():
        assert name in statement.split("\n", 1)[0], name
        assert not statement.lstrip().startswith("--")


def _reloptions() -> dict[str, dict[str, str]]:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT relname, reloptions FROM pg_class WHERE relname = ANY(%s)",
            [list(sql.storage())],
        )
        return {
            name: dict(option.split("=", 1) for option in options or []) for name, options in cursor
        }


@pytest.mark.postgres(reason="storage parameters are PostgreSQL's")
def test_the_hot_tables_have_the_autovacuum_settings_of_the_storage_file() -> None:
    assert _reloptions() == sql.storage()
    assert set(sql.storage()) == {"django_durable_jobs_jobrun", "django_durable_jobs_steprecord"}


@pytest.mark.postgres(reason="storage parameters are PostgreSQL's")
def test_the_autovacuum_settings_are_reset_and_set_again() -> None:
    """What the migration does backwards, then forwards (in the test's transaction)."""
    with connection.schema_editor() as editor:
        sql.reset_storage(editor)
    assert _reloptions() == {table: {} for table in sql.storage()}
    with connection.schema_editor() as editor:
        sql.set_storage(editor)
    assert _reloptions() == sql.storage()
