"""Settings for the example project: a playground for the admin and ``runjobs``.

Configuration comes from the environment (and an optional ``.env`` file next to
``manage.py``): ``DATABASE_URL`` (default: the SQLite file ``example.sqlite3``;
``postgres://postgres@127.0.0.1:5432/durable_jobs`` for PostgreSQL), ``DEMO_SLEEP``
(how long onboarding lets a customer look around, default ``2s``), ``DEMO_FLAKY``
(the first attempt to send a receipt fails, default off), ``EMAIL_BACKEND``.
"""

from pathlib import Path

import django
import environ

BASE_DIR = Path(__file__).resolve().parent.parent

env = environ.Env()
if (BASE_DIR / ".env").is_file():
    environ.Env.read_env(BASE_DIR / ".env")

DEBUG = env.bool("DEBUG", default=True)
SECRET_KEY = env.str("SECRET_KEY", default="django-insecure-example-project-dev-only")
ALLOWED_HOSTS = env.list("ALLOWED_HOSTS", default=["localhost", "127.0.0.1", "[::1]"])

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django_durable_jobs",
    "example_project.shop",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "example_project.urls"
WSGI_APPLICATION = "example_project.wsgi.application"

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

DATABASES = {
    "default": env.db("DATABASE_URL", default=f"sqlite:///{BASE_DIR / 'example.sqlite3'}"),
}

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

USE_TZ = True
TIME_ZONE = env.str("TIME_ZONE", default="UTC")
USE_I18N = True

STATIC_URL = "/static/"

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "root": {"handlers": ["console"], "level": "INFO"},
    # Django's default config gives "django" its own console handler, and its records
    # also reach the root's: every line twice. Let them reach the root's only.
    "loggers": {"django": {"handlers": [], "level": "INFO", "propagate": True}},
}

_email_backend = env.str("EMAIL_BACKEND", default="django.core.mail.backends.console.EmailBackend")
if django.VERSION >= (6, 1):  # mail is configured through MAILERS from Django 6.1 on
    MAILERS = {"default": {"BACKEND": _email_backend}}
else:
    EMAIL_BACKEND = _email_backend
DEFAULT_FROM_EMAIL = "shop@example.com"

# The shop's onboarding flow (example_project/shop/jobs.py).
SHOP_LOOK_AROUND = env.str("DEMO_SLEEP", default="2s")
SHOP_FLAKY_MAIL = env.bool("DEMO_FLAKY", default=False)
# The nightly sales report (a schedule): 03:00 in TIME_ZONE, mailed to SHOP_REPORT_TO.
SHOP_REPORT_CRON = env.str("SHOP_REPORT_CRON", default="0 3 * * *")
SHOP_REPORT_TO = env.str("SHOP_REPORT_TO", default="owner@example.com")

DURABLE_JOBS: dict[str, object] = {
    # SQLite cannot wake a worker (PostgreSQL does, with LISTEN/NOTIFY): poll often.
    "POLL_INTERVAL": env.str("JOBS_POLL_INTERVAL", default="250ms"),
}
