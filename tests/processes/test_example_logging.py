"""What a newcomer reads in the example project's terminal: every log line once, and
a worker stopped while idle does not claim to be finishing a run."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import own_sqlite_file
from tests.processes.lifeline import die_with_test

REPO_DIR = Path(__file__).resolve().parents[2]

pytestmark = [pytest.mark.slow, pytest.mark.subprocess, own_sqlite_file]


def example_env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DURABLE_JOBS_")}
    env.update(
        DJANGO_SETTINGS_MODULE="example_project.settings",
        DATABASE_URL=f"sqlite:///{tmp_path / 'example.sqlite3'}",
    )
    return env


def test_each_django_log_line_is_printed_once(tmp_path: Path) -> None:
    code = "import logging; logging.getLogger('django.request').warning('once-marker')"
    logged = subprocess.run(
        [sys.executable, "manage.py", "shell", "--no-imports", "-c", code],
        cwd=REPO_DIR,
        env=example_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert logged.returncode == 0, logged.stderr
    assert logged.stderr.count("once-marker") == 1


def test_an_idle_worker_stopped_by_sigterm_says_it_was_idle(tmp_path: Path) -> None:
    env = example_env(tmp_path)
    migrate = [sys.executable, "manage.py", "migrate", "--noinput"]
    subprocess.run(migrate, cwd=REPO_DIR, env=env, check=True, capture_output=True, timeout=120)
    log = tmp_path / "worker.log"
    with log.open("w") as sink:
        worker = subprocess.Popen(
            [sys.executable, "manage.py", "runjobs"],
            cwd=REPO_DIR,
            env=env,
            stdout=sink,
            stderr=subprocess.STDOUT,
            preexec_fn=die_with_test,
        )
        try:
            deadline = time.monotonic() + 60  # generous: the machine may be busy
            while "job(s) registered" not in log.read_text() or "wake=" not in log.read_text():
                assert worker.poll() is None, log.read_text()
                assert time.monotonic() < deadline, log.read_text()
                time.sleep(0.1)
            worker.send_signal(signal.SIGTERM)
            assert worker.wait(timeout=60) == 0
        finally:
            if worker.poll() is None:
                worker.kill()
                worker.wait()
    output = log.read_text()
    assert "stopping (SIGTERM): idle, exiting" in output
    assert "finishing the run in hand" not in output
    assert output.count("job(s) registered") == 1  # once, not once per handler
