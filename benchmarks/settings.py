"""Django settings for the benchmark: PostgreSQL, persistent connections, no DEBUG.

The database (``bench_durable_jobs`` on 127.0.0.1:5432, user postgres) is dropped and
recreated by ``benchmarks/run.py``; override with ``BENCH_DB``, ``BENCH_PG_HOST``,
``BENCH_PG_PORT`` and ``BENCH_PG_USER``; ``BENCH_ENGINE=mysql`` for MariaDB/MySQL.
"""

import os

SECRET_KEY = "django-durable-jobs-benchmark-not-secret"
# DEBUG off: with DEBUG on Django keeps every query in memory, which slows a worker down.
DEBUG = False
USE_TZ = True
TIME_ZONE = "UTC"

INSTALLED_APPS = [
    "django.contrib.contenttypes",
    "django.contrib.auth",
    "django_durable_jobs",
    "benchmarks",  # its jobs.py is autodiscovered
]

DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": os.environ.get("BENCH_DB", "bench_durable_jobs"),
        "USER": os.environ.get("BENCH_PG_USER", "postgres"),
        "HOST": os.environ.get("BENCH_PG_HOST", "127.0.0.1"),
        "PORT": int(os.environ.get("BENCH_PG_PORT", "5432")),
        # Persistent connections: a worker keeps one connection for its whole life
        # (the peers are measured the same way: django-tasks-db with CONN_MAX_AGE=600).
        # BENCH_CONN_MAX_AGE=0 is Django's default, which a worker must not pay for.
        "CONN_MAX_AGE": (
            int(os.environ["BENCH_CONN_MAX_AGE"]) if os.environ.get("BENCH_CONN_MAX_AGE") else None
        ),
    }
}
# BENCH_ENGINE=mysql: the same on MariaDB/MySQL (benchmarks/mariadb.py, the MariaDB column),
# database BENCH_MYSQL_DB (default bench_durable_jobs) on 127.0.0.1:3306, user root.
if os.environ.get("BENCH_ENGINE") == "mysql":
    DATABASES = {
        "default": {
            "ENGINE": "django.db.backends.mysql",
            "NAME": os.environ.get("BENCH_MYSQL_DB", "bench_durable_jobs"),
            "USER": os.environ.get("BENCH_MYSQL_USER", "root"),
            "HOST": os.environ.get("BENCH_MYSQL_HOST", "127.0.0.1"),
            "PORT": int(os.environ.get("BENCH_MYSQL_PORT", "3306")),
            "OPTIONS": {"charset": "utf8mb4"},
            "CONN_MAX_AGE": None,
        }
    }
# BENCH_ENGINE=sqlite: a SQLite file (BENCH_SQLITE_PATH, default .tmp/bench/bench.sqlite3),
# workers waiting for its lock (benchmarks/bulk.py, benchmarks/wakeup.py --engine sqlite).
if os.environ.get("BENCH_ENGINE") == "sqlite":
    _work = os.environ.get(
        "BENCH_WORK_DIR", os.path.join(os.path.dirname(os.path.dirname(__file__)), ".tmp", "bench")
    )
    DATABASES = {
        "default": {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": os.environ.get("BENCH_SQLITE_PATH", os.path.join(_work, "bench.sqlite3")),
            "CONN_MAX_AGE": None,
            "OPTIONS": {"timeout": 30},
        }
    }
# BENCH_LISTEN_PORT: the workers LISTEN on that port (DURABLE_JOBS["LISTEN_DATABASE"]),
# the rest going to BENCH_PG_PORT (benchmarks/workers.py: PgBouncer there, PostgreSQL here).
if os.environ.get("BENCH_LISTEN_PORT"):
    DATABASES["listen"] = {**DATABASES["default"], "PORT": int(os.environ["BENCH_LISTEN_PORT"])}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# Only documented settings. An idle PostgreSQL worker is woken by LISTEN/NOTIFY; the
# poll interval is its fallback (the default, 1s, unless BENCH_POLL_INTERVAL says).
DURABLE_JOBS = {
    "POLL_INTERVAL": os.environ.get("BENCH_POLL_INTERVAL", "1s"),
}
if os.environ.get("BENCH_LISTEN_PORT"):
    DURABLE_JOBS["LISTEN_DATABASE"] = "listen"
