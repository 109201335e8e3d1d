"""``make test`` on a fresh machine: its venv step runs scripts/system-packages, which
installs what is missing (as root) or says in one line exactly what to install.

Run as the unprivileged user ``nobody``, with package names that do not exist, so that
nothing is installed on this machine by the test.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

REPO_DIR = Path(__file__).resolve().parents[2]
SCRIPT = REPO_DIR / "scripts" / "system-packages"

pytestmark = pytest.mark.skipif(
    shutil.which("dpkg-query") is None or shutil.which("setpriv") is None or os.getuid() != 0,
    reason="needs Debian's dpkg-query, and root to run the script as nobody",
)


def as_nobody(required: str, optional: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", str(SCRIPT)],
        env={"PATH": os.environ["PATH"], "SYSTEM_REQUIRED": required, "SYSTEM_OPTIONAL": optional},
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_a_missing_required_package_is_one_line_saying_what_to_install() -> None:
    done = as_nobody("pkg-config durable-jobs-no-such-package", "")
    assert done.returncode == 1
    assert done.stderr == (
        "make test needs system packages first: "
        "sudo apt-get install -y durable-jobs-no-such-package\n"
    )


def test_a_missing_optional_package_only_says_what_will_be_skipped() -> None:
    done = as_nobody("pkg-config", "durable-jobs-no-such-browser")
    assert done.returncode == 0
    assert "durable-jobs-no-such-browser not installed: the browser test will be skipped" in (
        done.stderr
    )


def test_with_everything_installed_it_says_nothing() -> None:
    done = as_nobody("pkg-config", "")
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")


def test_the_makefile_venv_step_runs_it_before_building_a_venv() -> None:
    dry = subprocess.run(
        ["make", "-n", "-B", ".venv/py312-dj61/.installed"],
        cwd=REPO_DIR,
        capture_output=True,
        text=True,
        timeout=60,
    )
    lines = dry.stdout.splitlines()
    assert "scripts/system-packages" in lines
    first_venv = next(i for i, line in enumerate(lines) if " -m venv " in line)
    assert lines.index("scripts/system-packages") < first_venv
    assert "dpkg" not in (REPO_DIR / ".ci" / "run").read_text()  # one place installs them
