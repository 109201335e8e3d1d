"""``manage.py demo`` end to end: the example project's flow with a real worker process,
on a SQLite file of its own."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import own_sqlite_file

REPO_DIR = Path(__file__).resolve().parents[2]


@pytest.mark.slow
@pytest.mark.subprocess
@own_sqlite_file
def test_manage_py_demo_runs_the_flow_with_a_real_worker(tmp_path: Path) -> None:
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "example_project.settings",
        "DATABASE_URL": f"sqlite:///{tmp_path / 'example.sqlite3'}",
        "DEMO_SLEEP": "1s",
    }

    def manage(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "manage.py", *args],
            cwd=REPO_DIR,
            env=env,
            capture_output=True,
            text=True,
            timeout=180,
            check=False,
        )

    migrated = manage("migrate", "--noinput")
    assert migrated.returncode == 0, migrated.stderr
    for _ in range(2):  # a second demo works too
        demo = manage("demo", "--timeout", "60")
        assert demo.returncode == 0, demo.stdout + demo.stderr
        assert "run: waiting for order.paid" in demo.stdout
        assert '"ordered": true' in demo.stdout
        assert "worker stopped with SIGTERM (exit code 0)" in demo.stdout
