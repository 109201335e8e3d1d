"""A project that uses this app without it in ``INSTALLED_APPS``: ``publish_on`` in
another app's ``ready()`` stops every command with what to add, not with Django's
"Model class ... doesn't declare an explicit app_label". A real ``manage.py check`` on
a small project written to a temporary directory."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import own_sqlite_file

REPO_DIR = Path(__file__).resolve().parents[2]

pytestmark = [pytest.mark.subprocess, own_sqlite_file]

SETTINGS = """
SECRET_KEY = "x"
USE_TZ = True
INSTALLED_APPS = ["django.contrib.contenttypes", "shop.apps.ShopConfig"]  # ours left out
DATABASES = {"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"}}
"""

APPS = """
from django.apps import AppConfig
from django.db.models.signals import post_save


class ShopConfig(AppConfig):
    name = "shop"

    def ready(self):
        from django_durable_jobs import publish_on

        publish_on(post_save, event="shop.saved")
"""


def test_publish_on_without_the_app_installed_says_to_add_it(tmp_path: Path) -> None:
    (tmp_path / "shop").mkdir()
    (tmp_path / "shop" / "__init__.py").write_text("")
    (tmp_path / "shop" / "apps.py").write_text(APPS)
    (tmp_path / "shop_settings.py").write_text(SETTINGS)
    env = {k: v for k, v in os.environ.items() if not k.startswith("DURABLE_JOBS_")}
    env.pop("DATABASE_URL", None)
    env.update(
        PYTHONPATH=os.pathsep.join([str(tmp_path), str(REPO_DIR)]),
        DJANGO_SETTINGS_MODULE="shop_settings",
    )
    checked = subprocess.run(
        [sys.executable, "-m", "django", "check"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert checked.returncode == 1
    last = checked.stderr.strip().splitlines()[-1]
    assert last.startswith("django.core.exceptions.ImproperlyConfigured: add ")
    assert "add 'django_durable_jobs' to INSTALLED_APPS" in last
    assert "explicit app_label" not in checked.stderr
