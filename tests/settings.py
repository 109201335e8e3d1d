"""Settings for the test suite (pytest-django reads them via pyproject.toml).

The database comes from DATABASE_URL (parsed by django-environ) and defaults to
SQLite. The SQLite test database is a real file, never ``:memory:``: the worker
tests spawn separate processes that must see the same database.
"""

import os
from pathlib import Path

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
]

_default_db = environ.Env.db_url_config(
    os.environ.get("DATABASE_URL") or f"sqlite:///{TMP_DIR / 'test-default.sqlite3'}"
)
if _default_db["ENGINE"] == "django.db.backends.sqlite3":
    _default_db["TEST"] = {"NAME": str(TMP_DIR / "test-durable-jobs.sqlite3")}
    # Worker processes write to the same file: wait for locks instead of failing at once.
    _default_db["OPTIONS"] = {"timeout": 20}
elif _default_db["ENGINE"] == "django.db.backends.postgresql":
    _default_db["TEST"] = {"NAME": "test_durable_jobs"}
    _default_db["CONN_MAX_AGE"] = 0
DATABASES = {"default": _default_db}

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

DURABLE_JOBS: dict[str, object] = {}
