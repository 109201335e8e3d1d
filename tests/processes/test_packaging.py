"""What a user installs: the built wheel carries templates, static files, migrations and
the licence, not the documentation, and works from outside this checkout, as does the
install from a clone (docs/how-to/install.md); ``twine check`` finds nothing PyPI would
refuse in the wheel and the sdist."""

from __future__ import annotations

import subprocess
import sys
import sysconfig
import tarfile
import zipfile
from pathlib import Path

import pytest

from tests.conftest import own_sqlite_file

ROOT = Path(__file__).resolve().parents[2]

# Run in a fresh interpreter whose only copy of the app is the installed wheel.
PROBE = """
import sys
from pathlib import Path
import django
from django.conf import settings

settings.configure(
    INSTALLED_APPS=["django.contrib.contenttypes", "django.contrib.auth",
                    "django.contrib.admin", "django.contrib.staticfiles",
                    "django_durable_jobs"],
    DATABASES={"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"}},
    TEMPLATES=[{"BACKEND": "django.template.backends.django.DjangoTemplates",
                "APP_DIRS": True}],
    STATIC_URL="/static/",
)
django.setup()
import django_durable_jobs
from django.contrib.staticfiles import finders
from django.db.migrations.loader import MigrationLoader
from django.template.loader import get_template

target = Path(sys.argv[1]).resolve()
package = django_durable_jobs.__file__
assert Path(package).resolve().is_relative_to(target), package
template = get_template("django_durable_jobs/timeline.html").origin.name
assert Path(template).resolve().is_relative_to(target), template
for static in ("timeline.css", "refresh.js"):
    found = finders.find(f"django_durable_jobs/{static}")
    assert found and Path(found).resolve().is_relative_to(target), static
migrations = MigrationLoader(None, ignore_no_migrations=True).disk_migrations
ours = sorted(name for app, name in migrations if app == "django_durable_jobs")
print("migrations", len(ours), ours[0])
"""


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``python -m build``: the sdist and the wheel built from it, with the hatchling of
    this environment (``--no-isolation``: no network)."""
    out = tmp_path_factory.mktemp("dist")
    subprocess.run(
        [sys.executable, "-m", "build", "--no-isolation", "--outdir", str(out)],
        cwd=ROOT,
        check=True,
        capture_output=True,
        timeout=300,
    )
    return out


@pytest.fixture(scope="module")
def wheel(dist: Path) -> Path:
    (built,) = dist.glob("django_durable_jobs-*.whl")
    return built


@pytest.mark.slow
@pytest.mark.subprocess
@own_sqlite_file
def test_twine_check_passes_on_the_wheel_and_the_sdist(dist: Path) -> None:
    """What PyPI checks at upload: the metadata, and that the README renders."""
    built = sorted(str(path) for path in dist.iterdir())
    assert len(built) == 2
    checked = subprocess.run(
        [sys.executable, "-m", "twine", "check", "--strict", *built],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert checked.stdout.count("PASSED") == 2


@pytest.mark.slow
@pytest.mark.subprocess
@own_sqlite_file
def test_the_wheel_leaves_the_documentation_out_and_the_sdist_keeps_it(dist: Path) -> None:
    (wheel,) = dist.glob("*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert not [n for n in names if n.startswith("docs/") or n.endswith((".md", ".png"))]
    (sdist,) = dist.glob("*.tar.gz")
    with tarfile.open(sdist) as archive:
        kept = {Path(*Path(n).parts[1:]).as_posix() for n in archive.getnames()}
    assert {"docs/index.md", "docs/conf.py", "CHANGELOG.md", "README.md"} <= kept


@pytest.mark.slow
@pytest.mark.subprocess
@own_sqlite_file
def test_the_wheel_carries_templates_static_files_migrations_and_the_licence(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    migrations = sorted(ROOT.glob("django_durable_jobs/migrations/0*.py"))
    assert migrations
    for path in [
        *migrations,
        *ROOT.glob("django_durable_jobs/templates/**/*.html"),
        *(path for path in ROOT.glob("django_durable_jobs/static/**/*") if path.is_file()),
        ROOT / "django_durable_jobs/py.typed",
    ]:
        assert path.relative_to(ROOT).as_posix() in names
    # The stylesheets and the script that refreshes a live run page and the dashboard.
    assert "django_durable_jobs/static/django_durable_jobs/refresh.js" in names
    assert "django_durable_jobs/static/django_durable_jobs/runs.css" in names
    assert any(name.endswith("licenses/LICENSE") for name in names)
    metadata = next(
        zipfile.ZipFile(wheel).read(n).decode() for n in names if n.endswith("METADATA")
    )
    assert "License-Expression: MIT" in metadata
    assert "Classifier: Framework :: Django :: 6.1" in metadata
    assert "Provides-Extra: test" in metadata


@pytest.mark.slow
@pytest.mark.subprocess
@own_sqlite_file
def test_the_installed_wheel_finds_its_templates_static_files_and_migrations(wheel, tmp_path):
    target = tmp_path / "site"
    pip = [sys.executable, "-m", "pip", "install", "-q", "--no-deps"]
    subprocess.run(
        [*pip, "--disable-pip-version-check", "--target", str(target), str(wheel)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    probe = subprocess.run(
        [sys.executable, "-c", PROBE, str(target)],
        cwd=tmp_path,  # not this checkout: its package must not shadow the wheel's
        env={"PYTHONPATH": str(target), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert probe.returncode == 0, probe.stderr
    count = len(list(ROOT.glob("django_durable_jobs/migrations/0*.py")))
    assert probe.stdout.startswith(f"migrations {count} 0001_initial")


@pytest.mark.slow
@pytest.mark.subprocess
@own_sqlite_file
def test_the_readme_install_from_a_clone_finds_templates_static_files_and_migrations(
    tmp_path: Path,
) -> None:
    """docs/how-to/install.md: ``git clone`` this repository, then ``pip install
    "./django-durable-jobs[postgres]"`` into a fresh virtualenv, which gets a copy of the
    app (not a link to the clone) with its templates, static files and migrations.

    The command is the page's with three flags, so that it needs no network and takes
    seconds: ``--no-build-isolation`` builds with the hatchling of this test's own
    environment, where the page's pip would fetch it for the build; ``--no-deps`` leaves
    Django, cronsim and psycopg to that environment too (a ``.pth`` file puts its
    site-packages on the new virtualenv's path, as ``--system-site-packages`` does for a
    system Python's: the venv is made from this interpreter, often a venv itself, whose
    "system" would be the bare base Python); ``--ignore-installed`` keeps pip from even
    attempting to uninstall the editable copy that environment holds. The clone is of
    the last commit, as a user's would be: a file missing from git fails here.
    """
    if not (ROOT / ".git").exists():
        pytest.skip("not a git checkout: nothing to clone")
    clone = tmp_path / "django-durable-jobs"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True, timeout=60)
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = str(venv / "bin" / "python")
    paths = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
    target = subprocess.run([python, "-c", paths], check=True, capture_output=True, text=True)
    site = Path(target.stdout.strip())
    (site / "test-environment.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    pip = [python, "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    offline = ["--no-build-isolation", "--no-deps", "--ignore-installed"]
    subprocess.run(
        [*pip, *offline, "./django-durable-jobs[postgres]"],
        cwd=tmp_path,
        env=env,
        check=True,
        capture_output=True,
        timeout=120,
    )
    probe = subprocess.run(
        [python, "-c", PROBE, str(site)],
        cwd=tmp_path,  # neither this checkout nor the clone: only the installed copy
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert probe.returncode == 0, probe.stderr
    assert not (site / "_editable_impl_django_durable_jobs.pth").exists()  # a copy, not a link
    count = len(list(ROOT.glob("django_durable_jobs/migrations/0*.py")))
    assert probe.stdout.startswith(f"migrations {count} 0001_initial")
