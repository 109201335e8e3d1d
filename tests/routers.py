"""The test suite's database router: the ``jobs`` alias (the jobs on a database of
their own, tests/settings.py) gets this app's tables only, as a project's router
would give it (docs/how-to/databases.md); the ``replica`` alias, a streaming copy of
``default``, gets none (it is read-only, and what is migrated on ``default`` reaches
it); every other alias gets every app's."""

from __future__ import annotations

from typing import Any


class JobsDatabaseRouter:
    def allow_migrate(self, db: str, app_label: str, **hints: Any) -> bool | None:
        if db == "jobs":
            return app_label == "django_durable_jobs"
        if db == "replica":
            return False
        return None
