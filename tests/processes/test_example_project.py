"""``manage.py demo`` end to end: the example project's flow with a real worker process,
on a SQLite file of its own."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import own_sqlite_file

REPO_DIR = Path(__file__).resolve().parents[2]


def manage(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=REPO_DIR,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )


def example_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    """The example project's settings on a SQLite file of its own, with the defaults of
    the settings it reads from the environment (whatever this shell has set)."""
    env = {k: v for k, v in os.environ.items() if k not in ("TIME_ZONE", "SHOP_REPORT_CRON")}
    return {
        **env,
        "DJANGO_SETTINGS_MODULE": "example_project.settings",
        "DATABASE_URL": f"sqlite:///{tmp_path / 'example.sqlite3'}",
        **extra,
    }


@pytest.mark.slow
@pytest.mark.subprocess
@own_sqlite_file
def test_manage_py_demo_runs_the_flow_with_a_real_worker(tmp_path: Path) -> None:
    env = example_env(tmp_path, DEMO_SLEEP="1s")
    migrated = manage(env, "migrate", "--noinput")
    assert migrated.returncode == 0, migrated.stderr
    for _ in range(2):  # a second demo works too
        demo = manage(env, "demo", "--timeout", "60")
        assert demo.returncode == 0, demo.stdout + demo.stderr
        assert "run: waiting for order.paid" in demo.stdout
        assert '"ordered": true' in demo.stdout
        assert "worker stopped with SIGTERM (exit code 0)" in demo.stdout


@pytest.mark.subprocess
@own_sqlite_file
def test_the_example_declares_its_nightly_report_at_three(tmp_path: Path) -> None:
    """The schedule tests/integration/verbs/test_example_schedules.py builds by hand (the test
    settings declare none) is the one example_project.settings declares: ``migrate``
    syncs it from code, ``shop.nightly_report`` at ``0 3 * * *`` in TIME_ZONE."""
    env = example_env(tmp_path)
    migrated = manage(env, "migrate", "--noinput")
    assert migrated.returncode == 0, migrated.stderr
    assert "schedules: 1 added" in migrated.stderr  # logged by the sync on migrate
    listed = manage(env, "jobs", "schedules", "--json")
    assert listed.returncode == 0, listed.stderr
    (schedule,) = json.loads(listed.stdout)
    declared = {key: schedule[key] for key in ("job_name", "cron", "timezone", "enabled")}
    assert declared == {
        "job_name": "shop.nightly_report",
        "cron": "0 3 * * *",
        "timezone": "UTC",  # the example's TIME_ZONE
        "enabled": True,
    }
    assert schedule["declared_in_code"] is True
    assert [when[11:] for when in schedule["next_runs"]] == ["03:00:00+00:00"] * 3
