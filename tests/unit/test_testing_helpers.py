"""The pytest plugin imports in a project without Django settings (pytest loads it in
every project that has the package installed)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO_DIR = Path(__file__).resolve().parents[2]


def test_the_plugin_imports_without_django_settings() -> None:
    # Loaded by pytest in every project that has the package installed.
    env = {key: value for key, value in os.environ.items() if key != "DJANGO_SETTINGS_MODULE"}
    done = subprocess.run(
        [sys.executable, "-c", "import django_durable_jobs.pytest_plugin"],
        cwd=REPO_DIR,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
