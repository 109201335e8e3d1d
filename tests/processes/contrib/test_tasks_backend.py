"""The ``django.tasks`` backend with a real ``runjobs --burst`` process on the test
database (Django >= 6.0)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import django
import pytest
from django.db import connection

HAS_TASKS = django.VERSION >= (6, 0)
needs_tasks = pytest.mark.skipif(not HAS_TASKS, reason="django.tasks needs Django 6.0 or newer")

if HAS_TASKS:
    from django.tasks import TaskResultStatus

    from tests.testapp import tasks


REPO_DIR = Path(__file__).resolve().parents[3]


@needs_tasks
@pytest.mark.subprocess
@pytest.mark.django_db(transaction=True)
def test_a_real_worker_process_executes_an_enqueued_task() -> None:
    result = tasks.send_email.enqueue("grace@example.com", subject="welcome")
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "tests.settings",
        "DURABLE_JOBS_TEST_DB_NAME": str(connection.settings_dict["NAME"]),
        "PYTHONUNBUFFERED": "1",
    }
    done = subprocess.run(
        [sys.executable, "-m", "django", "runjobs", "--burst", "--worker-id", "task-worker"],
        cwd=REPO_DIR,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    fetched = tasks.send_email.get_result(result.id)
    assert fetched.status == TaskResultStatus.SUCCESSFUL, done.stderr
    assert fetched.return_value == "welcome -> grace@example.com"
    assert fetched.worker_ids == ["task-worker"]
