"""``manage.py jobs`` in a real process: a mistake is one line on stderr, never a
traceback."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.db import connection

REPO_DIR = Path(__file__).resolve().parents[3]


@pytest.mark.subprocess
@pytest.mark.django_db(transaction=True)  # the test database exists, migrated, for the process
@pytest.mark.parametrize(
    "args",
    [
        ("show", "00000000-0000-0000-0000-000000000000"),
        ("publish", "order.paid", "--payload", "{oops"),
        ("purge", "--older-than", "soon"),
    ],
)
def test_a_real_process_prints_one_line_and_no_traceback(args: tuple[str, ...]) -> None:
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "tests.settings",
        "DURABLE_JOBS_TEST_DB_NAME": str(connection.settings_dict["NAME"]),
    }
    done = subprocess.run(
        [sys.executable, "-m", "django", "jobs", *args],
        cwd=REPO_DIR,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode != 0
    assert "Traceback" not in done.stderr
    assert done.stderr.startswith("CommandError: ") and len(done.stderr.strip().splitlines()) == 1
