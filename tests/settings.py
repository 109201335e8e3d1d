"""Settings for the test suite (pytest-django reads them via pyproject.toml).

The database comes from DATABASE_URL (parsed by django-environ) and defaults to
SQLite. The SQLite test database is a real file, never ``:memory:``: the worker
tests spawn separate processes that must see the same database.
"""

import faulthandler
import os
import signal
from pathlib import Path
from typing import Any

import django
import environ

REPO_DIR = Path(__file__).resolve().parent.parent
TMP_DIR = REPO_DIR / ".tmp"
TMP_DIR.mkdir(exist_ok=True)

SECRET_KEY = "django-durable-jobs-tests-not-secret"
DEBUG = False
ALLOWED_HOSTS = ["testserver", "localhost", "127.0.0.1"]

USE_TZ = True
TIME_ZONE = "UTC"
USE_I18N = True

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django_durable_jobs",
    "tests.testapp",
    # The example project's shop, tested with django_durable_jobs.testing.
    "example_project.shop",
]

_default_db = environ.Env.db_url_config(
    os.environ.get("DATABASE_URL") or f"sqlite:///{TMP_DIR / 'test-default.sqlite3'}"
)
if _default_db["ENGINE"] == "django.db.backends.sqlite3":
    # A file named in DATABASE_URL gets its own test file next to it (test-<name>).
    _sqlite_test = TMP_DIR / "test-durable-jobs.sqlite3"
    if os.environ.get("DATABASE_URL"):
        _sqlite_test = Path(_default_db["NAME"]).with_name(f"test-{Path(_default_db['NAME']).name}")
    _default_db["TEST"] = {"NAME": str(_sqlite_test)}
    # Worker processes write to the same file: wait for locks instead of failing at once.
    _default_db["OPTIONS"] = {"timeout": 20}
elif _default_db["ENGINE"] == "django.db.backends.postgresql":
    # test_<name>: test_durable_jobs for the Makefile's URL; another database name in
    # DATABASE_URL gives a separate test database (runs that must not share one).
    _default_db["TEST"] = {"NAME": f"test_{_default_db['NAME']}"}
    _default_db["CONN_MAX_AGE"] = 0
    # Django's other ways to connect (the Makefile's suite-postgresql-options runs the
    # suite so): cursors that send the parameters apart from the query, and a pool of
    # connections (psycopg_pool; Django's default size, 4: smaller than what a worker
    # with an async lane asks for), instead of parameters written in and a connection
    # per thread.
    if os.environ.get("DURABLE_JOBS_TEST_CONNECTION_OPTIONS") == "1":
        _default_db["OPTIONS"] = {"server_side_binding": True, "pool": True}
        del _default_db["CONN_MAX_AGE"]  # a pool refuses persistent connections
    # A project whose transactions are SERIALIZABLE (docs/how-to/postgresql.md,
    # "Drivers and connection options"): DURABLE_JOBS_TEST_ISOLATION=serializable.
    if os.environ.get("DURABLE_JOBS_TEST_ISOLATION") == "serializable":
        from psycopg import IsolationLevel

        _default_db.setdefault("OPTIONS", {})["isolation_level"] = IsolationLevel.SERIALIZABLE
elif _default_db["ENGINE"] == "django.db.backends.mysql":  # MariaDB (or MySQL)
    _default_db["TEST"] = {
        "NAME": f"test_{_default_db['NAME']}",
        "CHARSET": "utf8mb4",
        "COLLATION": "utf8mb4_unicode_ci",
    }
    _default_db["OPTIONS"] = {"charset": "utf8mb4"}
    _default_db["CONN_MAX_AGE"] = 0

# Worker subprocesses (tests/processes/worker/test_worker.py) must use the database pytest
# created, not the one DATABASE_URL names: the test passes it here (the SQLite file
# path, or test_durable_jobs on a server), read from connection.settings_dict["NAME"].
if os.environ.get("DURABLE_JOBS_TEST_DB_NAME"):
    _default_db["NAME"] = os.environ["DURABLE_JOBS_TEST_DB_NAME"]
#: A second database, for ``ctx.step.atomic``'s refusal of writes that would escape its
#: transaction (reads through it are allowed). Nothing is migrated there.
DATABASES = {
    "default": _default_db,
    "other": {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": ":memory:",
        "TEST": {"MIGRATE": False},
    },
}


def _beside(db: dict[str, Any], suffix: str) -> dict[str, Any]:
    """Another database of the same kind on the same server: ``<name>_<suffix>``."""
    test = dict(db.get("TEST") or {})
    if db["ENGINE"] == "django.db.backends.sqlite3":
        test["NAME"] = str(test["NAME"]).replace(".sqlite3", f"-{suffix}.sqlite3")
    else:
        test["NAME"] = f"{test['NAME']}_{suffix}"
    return {**db, "NAME": f"{db['NAME']}_{suffix}", "TEST": test}


#: The jobs on a database of their own (``DURABLE_JOBS["DATABASE"] = "jobs"``):
#: tests/integration/db/test_jobs_database.py and a processes test. Created only for
#: the tests that ask for it (``django_db(databases=[..., "jobs"])``).
DATABASES["jobs"] = _beside(_default_db, "jobs")
DATABASE_ROUTERS = ["tests.routers.JobsDatabaseRouter"]  # only this app's tables there
if os.environ.get("DURABLE_JOBS_TEST_JOBS_DB_NAME"):  # a worker subprocess, as above
    DATABASES["jobs"]["NAME"] = os.environ["DURABLE_JOBS_TEST_JOBS_DB_NAME"]
elif os.environ.get("DURABLE_JOBS_TEST_DB_NAME"):
    # The subprocess of a test without a jobs database: no such alias, or Django's
    # checks at runjobs' start would connect to a database that does not exist.
    del DATABASES["jobs"]
if _default_db["ENGINE"] == "django.db.backends.postgresql":
    #: A streaming replica of the server, for ``DURABLE_JOBS["READ_DATABASE"]``: the
    #: ``replica`` fixture (tests/replica.py) starts it with ``pg_basebackup -R`` and
    #: sets its port; port 1 until then, so that nothing reads the primary through it.
    #: A physical replica copies the whole cluster, test databases included: the alias
    #: mirrors ``default``'s test database instead of having one created.
    DATABASES["replica"] = {
        **_default_db,
        "PORT": "1",
        "TEST": {"MIRROR": "default"},
        "CONN_MAX_AGE": 0,
    }

#: A worker subprocess whose DATABASE_URL is a pooler's LISTENs on this URL instead
#: (``DURABLE_JOBS["LISTEN_DATABASE"]``, tests/processes/db/test_pgbouncer.py).
if os.environ.get("DURABLE_JOBS_TEST_LISTEN_URL"):
    DATABASES["listen"] = {
        **environ.Env.db_url_config(os.environ["DURABLE_JOBS_TEST_LISTEN_URL"]),
        "TEST": {"MIRROR": "default"},
    }

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

ROOT_URLCONF = "tests.urls"

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

STATIC_URL = "/static/"

# Fast hashing: tests create users for the admin.
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "root": {"handlers": ["console"], "level": "WARNING"},
}

# Django 6.1 configures mail through MAILERS (the test runner makes it locmem anyway).
if django.VERSION >= (6, 1):
    MAILERS = {"default": {"BACKEND": "django.core.mail.backends.locmem.EmailBackend"}}

# django.tasks (Django >= 6.0; ignored by 5.2): tasks run as durable runs.
TASKS = {
    "default": {
        "BACKEND": "django_durable_jobs.backends.DurableJobsBackend",
        "QUEUES": ["default", "emails"],
        "OPTIONS": {"retries": 1, "backoff": "10s"},
    },
    "other": {"BACKEND": "django_durable_jobs.backends.DurableJobsBackend", "QUEUES": []},
}

DURABLE_JOBS: dict[str, object] = {}
# Worker subprocesses run with short leases so that a killed worker's run is taken
# over within seconds: DURABLE_JOBS_TEST_LEASE="2s", ..._HEARTBEAT, ..._POLL_INTERVAL.
for _key in ("LEASE", "HEARTBEAT", "POLL_INTERVAL", "UNKNOWN_JOB_GRACE"):
    if os.environ.get(f"DURABLE_JOBS_TEST_{_key}"):
        DURABLE_JOBS[_key] = os.environ[f"DURABLE_JOBS_TEST_{_key}"]
if os.environ.get("DURABLE_JOBS_TEST_LISTEN_URL"):
    DURABLE_JOBS["LISTEN_DATABASE"] = "listen"
# The jobs on their own database (tests/processes/worker/test_jobs_database.py).
if os.environ.get("DURABLE_JOBS_TEST_DATABASE"):
    DURABLE_JOBS["DATABASE"] = os.environ["DURABLE_JOBS_TEST_DATABASE"]
# The jobs one worker of a rolling deploy registers (tests/processes/worker/
# test_rolling_deploy.py): DURABLE_JOBS_TEST_JOB_MODULES="jobs,rolling_v1".
if os.environ.get("DURABLE_JOBS_TEST_JOB_MODULES"):
    DURABLE_JOBS["JOB_MODULES"] = os.environ["DURABLE_JOBS_TEST_JOB_MODULES"].split(",")
if os.environ.get("DURABLE_JOBS_TEST_LEASE"):
    # A worker subprocess of the processes tier: SIGQUIT prints every thread's stack
    # into its log (forked children too) and lets it run on. A wait that times out
    # sends it (tests/processes ``wait_until``), for workers that hang after their
    # start line with their database sessions idle.
    faulthandler.register(signal.SIGQUIT, all_threads=True)
