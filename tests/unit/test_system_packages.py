"""``make test`` on a fresh machine: its venv step runs scripts/system-packages, which
installs what is missing (as root) or says in one line exactly what to install.

Run as the unprivileged user ``nobody``, with package names that do not exist, so that
nothing is installed on this machine by the test; the branch that installs runs against
a fake ``apt-get`` (and ``dpkg-query``, ``sudo``) first on PATH, which only records.
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
    state: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """The script as ``nobody``; ``required=None`` keeps its own default list, ``path``
    goes first on PATH (a fake ``dpkg-query``), ``state`` adds to the environment."""
    env = {**(state or {}), "PATH": path + os.environ["PATH"], "SYSTEM_OPTIONAL": optional}
    if required is not None:
        env["SYSTEM_REQUIRED"] = required
    # A copy nobody can reach: the checkout may sit below a directory only its owner
    # may enter (a home of mode 0700, a clone inside ``mktemp -d``).
    with tempfile.TemporaryDirectory() as folder:
        os.chmod(folder, 0o755)
        script = Path(folder) / SCRIPT.name
        shutil.copy2(SCRIPT, script)
        script.chmod(0o755)
        command = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", str(script)]
        return subprocess.run(
            [*command, *interpreters],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            cwd=folder,
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
    assert (
        "durable-jobs-no-such-browser not installed: the tests that use them will be skipped"
        in (done.stderr)
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


# The branch that installs: a fake dpkg-query answers from a directory of installed
# packages, and a fake apt-get records its arguments and "installs" what its archive
# has (all or nothing, as apt-get does), so the real one never runs.
FAKE_DPKG_QUERY = """#!/bin/sh
for package; do :; done  # the last argument
[ -e "$FAKE_STATE/installed/$package" ] || exit 1
echo "install ok installed"
"""
FAKE_APT_GET = """#!/bin/sh
echo "$(id -u) $DEBIAN_FRONTEND $*" >>"$FAKE_STATE/log/apt-get"
[ "$1" = install ] || exit 0
packages=""
for argument; do
    case "$argument" in install|-*) ;; *) packages="$packages $argument" ;; esac
done
for package in $packages; do [ -e "$FAKE_STATE/archive/$package" ] || exit 100; done
for package in $packages; do touch "$FAKE_STATE/installed/$package"; done
"""
FAKE_SUDO = """#!/bin/sh
echo "$*" >>"$FAKE_STATE/log/sudo"
[ "$1" = -n ] || exit 1
shift
exec "$@"
"""


def fake_debian(
    state: Path, installed: list[str], archive: list[str], *, sudo: bool = False
) -> dict[str, str]:
    """The environment that runs the script against the fakes, in ``state``."""
    bin_dir = state / "bin"
    for folder in (bin_dir, state / "installed", state / "archive", state / "log"):
        folder.mkdir(mode=0o777)
        folder.chmod(0o777)  # nobody writes here too (the sudo test)
    for package in installed:
        (state / "installed" / package).touch()
    for package in archive:
        (state / "archive" / package).touch()
    executable(bin_dir / "dpkg-query", FAKE_DPKG_QUERY)
    executable(bin_dir / "apt-get", FAKE_APT_GET)
    if sudo:
        executable(bin_dir / "sudo", FAKE_SUDO)
    path = f"{bin_dir}:/usr/bin:/bin"
    # Never the real apt-get: the script reaches it through `env apt-get`, by this PATH.
    assert shutil.which("apt-get", path=path) == str(bin_dir / "apt-get")
    return {"PATH": path, "FAKE_STATE": str(state)}


def apt_calls(state: Path) -> list[str]:
    return (state / "log" / "apt-get").read_text().splitlines()


def test_as_root_it_installs_pkg_config_and_the_mariadb_headers_with_apt_get(
    shared_dir: Path,
) -> None:
    """A fresh machine: pkg-config and libmariadb-dev missing, the rest
    there; as root (CI, this machine) they are installed, in one apt-get install."""
    env = fake_debian(
        shared_dir,
        installed=["build-essential", "chromium", "chromium-driver", "pgbouncer"],
        archive=["libmariadb-dev", "pkg-config"],
    )
    done = subprocess.run([str(SCRIPT)], env=env, capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout == "== system packages: installing libmariadb-dev pkg-config ==\n"
    assert apt_calls(shared_dir) == [
        "0 noninteractive update -qq",
        "0 noninteractive install -y -qq libmariadb-dev pkg-config",
    ]


def test_what_apt_get_cannot_install_is_still_one_line_each(shared_dir: Path) -> None:
    """Required and optional packages are installed apart: chromium missing from the
    archive does not stop libmariadb-dev; a required one that stays missing fails."""
    env = fake_debian(
        shared_dir,
        installed=["build-essential", "chromium-driver", "pgbouncer"],
        archive=["pkg-config", "libmariadb-dev"],
    )
    env["SYSTEM_REQUIRED"] = "libmariadb-dev pkg-config durable-jobs-not-in-archive"
    done = subprocess.run([str(SCRIPT)], env=env, capture_output=True, text=True, timeout=60)
    assert apt_calls(shared_dir) == [
        "0 noninteractive update -qq",
        "0 noninteractive install -y -qq libmariadb-dev pkg-config durable-jobs-not-in-archive",
        "0 noninteractive install -y -qq chromium",
    ]
    assert done.returncode == 1
    assert done.stderr.splitlines() == [
        "make test: chromium not installed: the tests that use them will be skipped"
        " (sudo apt-get install -y chromium)",
        "make test needs system packages first: sudo apt-get install -y "
        "libmariadb-dev pkg-config durable-jobs-not-in-archive",
    ]


def test_not_root_it_installs_through_a_sudo_that_asks_no_password(shared_dir: Path) -> None:
    env = fake_debian(
        shared_dir,
        installed=["build-essential", "chromium", "chromium-driver"],
        archive=["libmariadb-dev", "pkg-config"],
        sudo=True,
    )
    bin_dir = shared_dir / "bin"
    done = as_nobody(None, "chromium chromium-driver", path=f"{bin_dir}:", state=env)
    assert (done.returncode, done.stderr) == (0, "")
    assert (shared_dir / "log" / "sudo").read_text().splitlines() == [
        "-n true",
        "-n env DEBIAN_FRONTEND=noninteractive apt-get update -qq",
        "-n env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libmariadb-dev pkg-config",
    ]
