"""Forgot ``migrate``: runjobs refuses to start saying so, a database system check
warns, and enqueue / publish_event and every ``jobs`` action say what to run instead
of "no such table"; a ``publish_on`` receiver publishes nothing and lets the
project's save stand.

Each test runs the real commands against its own fresh SQLite file, as a new user's
project would be.
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from django_durable_jobs.management.commands.jobs import Command as JobsCommand
from tests.conftest import own_sqlite_file

REPO_DIR = Path(__file__).resolve().parents[3]

pytestmark = [pytest.mark.slow, pytest.mark.subprocess, own_sqlite_file]


def manage(
    db: Path, *args: str, settings: str = "tests.settings"
) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DURABLE_JOBS_")}
    env.update(DATABASE_URL=f"sqlite:///{db}", DJANGO_SETTINGS_MODULE=settings)
    return subprocess.run(
        [sys.executable, "-m", "django", *args],
        cwd=REPO_DIR,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )


def test_runjobs_refuses_to_start_on_a_database_without_the_apps_migrations(tmp_path):
    db = tmp_path / "fresh.sqlite3"
    refused = manage(db, "runjobs", "--burst")
    assert refused.returncode == 1
    count = len(list((REPO_DIR / "django_durable_jobs/migrations").glob("0*.py")))
    assert f"django_durable_jobs has {count} unapplied migration(s) on database 'default'" in (
        refused.stderr
    )
    assert "0001_initial" in refused.stderr
    assert "run `python manage.py migrate` first" in refused.stderr
    assert "database error" not in refused.stderr  # no retry loop

    assert manage(db, "migrate", "django_durable_jobs", "0001").returncode == 0
    partly = manage(db, "runjobs", "--burst")
    assert partly.returncode == 1
    assert f"{count - 1} unapplied migration(s)" in partly.stderr and "0002" in partly.stderr
    assert "0001_initial" not in partly.stderr

    assert manage(db, "migrate").returncode == 0
    started = manage(db, "runjobs", "--burst")
    assert started.returncode == 0, started.stderr


def test_the_database_system_check_warns_until_migrate_runs(tmp_path):
    db = tmp_path / "fresh.sqlite3"
    warned = manage(db, "check", "--database", "default", "--fail-level", "WARNING")
    assert warned.returncode == 1
    assert "django_durable_jobs.W030" in warned.stderr
    assert "run `python manage.py migrate`" in warned.stderr
    # Without --database no check touches the database (Django's rule for checks).
    assert manage(db, "check", "--fail-level", "WARNING").returncode == 0
    assert manage(db, "migrate").returncode == 0
    clean = manage(db, "check", "--database", "default", "--fail-level", "WARNING")
    assert clean.returncode == 0, clean.stderr


def test_migrate_itself_does_not_warn_to_run_migrate(tmp_path):
    db = tmp_path / "fresh.sqlite3"
    before = manage(db, "check", "--database", "default")
    assert "django_durable_jobs.W030" in before.stderr  # the check is live on this file
    migrated = manage(db, "migrate")
    assert migrated.returncode == 0, migrated.stderr
    assert "Applying django_durable_jobs.0001_initial... OK" in migrated.stdout
    assert "W030" not in migrated.stderr + migrated.stdout
    assert "System check identified" not in migrated.stderr


#: The project's own writes, on a database where only its own app is migrated: orders
#: saved in autocommit and in a transaction (post_save: publish_on "order.paid"), then
#: how many there are.
SAVE_ORDERS = """
from django.db import transaction
from example_project.shop.models import Customer, Order
customer = Customer.objects.create(name='Ada', email='ada@example.com')
Order.objects.create(customer=customer, total='9.99', status='paid')
with transaction.atomic():
    Order.objects.create(customer=customer, total='1.00', status='paid')
    Customer.objects.create(name='Bob', email='bob@example.com')  # after the publish_on
print('orders', Order.objects.count())
"""


def test_publish_on_before_migrate_publishes_nothing_and_the_projects_save_stands(tmp_path):
    """A project's own saves before this app is migrated (its data migrations, its
    fixtures, ``migrate shop``): the save stands, nothing is published and a warning
    says why. A receiver that raised after the save had committed it anyway (in
    autocommit) and stopped the command that saved it."""
    db = tmp_path / "shop.sqlite3"
    assert manage(db, "migrate", "shop", settings="example_project.settings").returncode == 0
    saved = manage(db, "shell", "-c", SAVE_ORDERS, settings="example_project.settings")
    assert saved.returncode == 0, saved.stderr
    assert "orders 2" in saved.stdout
    assert "NotMigrated" not in saved.stderr and "Traceback" not in saved.stderr
    assert (
        "event 'order.paid' not published (publish_on): the tables of django_durable_jobs "
        "are not on database 'default' yet; run `python manage.py migrate`"
    ) in saved.stderr
    assert saved.stderr.count("not published") == 1  # once per event, not once per save


def test_enqueue_and_publish_event_say_run_migrate_on_an_unmigrated_database(tmp_path):
    db = tmp_path / "shop.sqlite3"
    # The project's own app is migrated, this one is not (the usual slip).
    assert manage(db, "migrate", "shop", settings="example_project.settings").returncode == 0
    published = manage(
        db,
        "shell",
        "-c",
        "from django_durable_jobs import publish_event\npublish_event('order.paid', key='1')",
        settings="example_project.settings",
    )
    assert published.returncode == 1
    assert "NotMigrated: the table django_durable_jobs_event does not exist on database " in (
        published.stderr
    )
    assert "run `python manage.py migrate`" in published.stderr

    enqueued = manage(
        db,
        "shell",
        "-c",
        "from example_project.shop.jobs import onboarding\nonboarding.enqueue(1)",
        settings="example_project.settings",
    )
    assert enqueued.returncode == 1
    assert "NotMigrated: the table django_durable_jobs_jobrun does not exist" in enqueued.stderr


#: Each ``jobs`` action with arguments it accepts (the run id is never looked up).
JOBS_ACTIONS = {
    "show": ["10a727de"],
    "list": [],
    "retry": ["10a727de"],
    "cancel": ["10a727de"],
    "wake": ["10a727de"],
    "replay": ["10a727de", "charge-card"],
    "publish": ["order.paid", "--key", "1"],
    "schedules": [],
    "workers": [],
    "stats": [],
    "purge": ["--older-than", "30d"],
    "versions": [],
    "pause": ["--queue", "emails"],
    "resume": ["--queue", "emails"],
    "pauses": [],
}


def test_the_cases_cover_every_jobs_action():
    parser = JobsCommand().create_parser("manage.py", "jobs")
    (sub,) = (a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    assert sorted(sub.choices) == sorted(JOBS_ACTIONS)


@pytest.mark.parametrize("action", JOBS_ACTIONS)
def test_every_jobs_action_says_run_migrate_on_an_unmigrated_database(tmp_path, action):
    refused = manage(tmp_path / "fresh.sqlite3", "jobs", action, *JOBS_ACTIONS[action])
    assert refused.returncode == 1
    assert refused.stderr.startswith("CommandError: the table django_durable_jobs_"), refused.stderr
    assert "does not exist on database 'default': run `python manage.py migrate`" in (
        refused.stderr
    )
    assert "Traceback" not in refused.stderr and refused.stderr.count("\n") == 1


@pytest.mark.parametrize(
    "action",
    [["list"], ["publish", "order.paid", "--key", "1"]],
    ids=["a-column-read", "a-column-written"],
)
def test_jobs_on_a_partly_migrated_database_says_run_migrate(tmp_path, action):
    """This app's tables are there, migrated by an older release: a column the code
    reads or writes is missing, and the migration that adds it is not applied. That
    was a traceback ("no such column"), not the line the missing tables get. The
    older release is made by hand: the newest migration unrecorded, and a column of
    the runs (read by ``list``) and of the events (written by ``publish``) dropped."""
    db = tmp_path / "older.sqlite3"
    assert manage(db, "migrate").returncode == 0
    with sqlite3.connect(db) as older:
        older.execute("ALTER TABLE django_durable_jobs_jobrun DROP COLUMN trace_context")
        older.execute("ALTER TABLE django_durable_jobs_event DROP COLUMN payload")
        older.execute(
            "DELETE FROM django_migrations WHERE app = 'django_durable_jobs' "
            "AND name = '0002_database_functions'"
        )
    refused = manage(db, "jobs", *action)
    assert refused.returncode == 1
    assert refused.stderr.startswith(
        "CommandError: django_durable_jobs has 1 unapplied migration(s) on "
        "database 'default' (0002_database_functions): "
    ), refused.stderr
    assert refused.stderr.rstrip().endswith(": run `python manage.py migrate`")
    assert "Traceback" not in refused.stderr and refused.stderr.count("\n") == 1
