"""``manage.py demo_superuser``: an ``admin`` / ``admin`` superuser for ``make run``
(local playground only: never on a server)."""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand


class Command(BaseCommand):
    help = "Create the demo superuser admin / admin if it does not exist."

    def handle(self, *args: Any, **options: Any) -> None:
        users = get_user_model()
        if users.objects.filter(username="admin").exists():
            self.stdout.write("superuser admin exists (password admin unless you changed it)")
            return
        users.objects.create_superuser("admin", "admin@example.com", "admin")
        self.stdout.write("created superuser admin / admin")
