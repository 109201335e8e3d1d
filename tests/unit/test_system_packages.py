"""``make test`` on a fresh machine: its venv step runs scripts/system-packages, which
installs what is missing (as root) or says in one line exactly what to install.

Run as the unprivileged user ``nobody``, with package names that do not exist, so that
nothing is installed on this machine by the test.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO_DIR = Path(__file__).resolve().parents[2]
SCRIPT = REPO_DIR / "scripts" / "system-packages"

pytestmark = pytest.mark.skipif(
    shutil.which("dpkg-query") is None or shutil.which("setpriv") is None or os.getuid() != 0,
    reason="needs Debian's dpkg-query, and root to run the script as nobody",
)


def as_nobody(
    required: str | None,
    optional: str,
    *interpreters: str,
    path: str = "",
) -> subprocess.CompletedProcess[str]:
    """The script as ``nobody``; ``required=None`` keeps its own default list, ``path``
    goes first on PATH (a fake ``dpkg-query``)."""
    env = {"PATH": path + os.environ["PATH"], "SYSTEM_OPTIONAL": optional}
    if required is not None:
        env["SYSTEM_REQUIRED"] = required
    return subprocess.run(
        ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", str(SCRIPT), *interpreters],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.fixture
def shared_dir() -> Iterator[Path]:
    """A directory ``nobody`` can read (pytest's tmp_path is private to root)."""
    with tempfile.TemporaryDirectory() as name:
        os.chmod(name, 0o755)
        yield Path(name)


def executable(path: Path, text: str) -> str:
    path.write_text(text)
    path.chmod(0o755)
    return str(path)


def test_a_missing_required_package_is_one_line_saying_what_to_install() -> None:
    done = as_nobody("pkg-config durable-jobs-no-such-package", "")
    assert done.returncode == 1
    assert done.stderr == (
        "make test needs system packages first: "
        "sudo apt-get install -y durable-jobs-no-such-package\n"
    )


def test_a_bare_debian_is_told_to_install_a_c_compiler_with_the_mariadb_headers(
    shared_dir: Path,
) -> None:
    # A dpkg-query for which nothing is installed: the script's own required list.
    bin_dir = shared_dir / "bin"
    bin_dir.mkdir(mode=0o755)
    executable(bin_dir / "dpkg-query", "#!/bin/sh\nexit 1\n")
    done = as_nobody(None, "", path=f"{bin_dir}:")
    assert done.returncode == 1
    assert done.stderr == (
        "make test needs system packages first: "
        "sudo apt-get install -y libmariadb-dev pkg-config build-essential\n"
    )


def test_an_interpreter_without_python_h_needs_its_dev_package(shared_dir: Path) -> None:
    with_headers = shared_dir / "with"
    with_headers.mkdir(mode=0o755)
    (with_headers / "Python.h").write_text("")
    without = executable(
        shared_dir / "python3.98", f"#!/bin/sh\necho {shared_dir / 'no-headers'}\n"
    )
    pyenv_like = executable(shared_dir / "python3.99", f"#!/bin/sh\necho {with_headers}\n")
    done = as_nobody("pkg-config", "", without, pyenv_like, str(shared_dir / "python3.97"))
    assert done.returncode == 1
    assert done.stderr == (
        "make test needs system packages first: sudo apt-get install -y python3.98-dev\n"
    )
    assert as_nobody("pkg-config", "", pyenv_like).returncode == 0


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
    packages = "PYENV_VERSION=3.12.1 scripts/system-packages python3.12"  # and its headers
    assert packages in lines
    first_venv = next(i for i, line in enumerate(lines) if " -m venv " in line)
    assert lines.index(packages) < first_venv
    assert "dpkg" not in (REPO_DIR / ".ci" / "run").read_text()  # one place installs them
