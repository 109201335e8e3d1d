"""Where jobs come from: a new project whose jobs live in ``tasks.py`` (the Celery
habit). The worker's banner lists the jobs it knows and where it looked, a setting
discovers other module names, and ``X_JOB_UNKNOWN`` says which module to check.

Real ``runjobs`` processes on a small project written to a temporary directory.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import own_sqlite_file

REPO_DIR = Path(__file__).resolve().parents[3]

pytestmark = [pytest.mark.slow, pytest.mark.subprocess, own_sqlite_file]

SETTINGS = """
import os
SECRET_KEY = "x"
USE_TZ = True
INSTALLED_APPS = ["django.contrib.contenttypes", "django_durable_jobs", "mini"]
DATABASES = {"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": os.environ["MINI_DB"]}}
# A run no live worker registers fails at once, not after UNKNOWN_JOB_GRACE: the
# worker of these tests is the only one, and the one that lacks the job.
DURABLE_JOBS = {"POLL_INTERVAL": "100ms", "UNKNOWN_JOB_GRACE": 0}
if os.environ.get("MINI_MODULES"):
    DURABLE_JOBS["JOB_MODULES"] = os.environ["MINI_MODULES"].split(",")
if os.environ.get("MINI_URLCONF"):
    ROOT_URLCONF = os.environ["MINI_URLCONF"]
"""

TASKS = """
from django_durable_jobs import job

@job(name="mini.welcome", retries=2, backoff="0", timeout="1m")
def welcome(ctx, user_id):
    return ctx.step.run("send", lambda: f"sent to {user_id}")
"""


@pytest.fixture
def project(tmp_path: Path):
    (tmp_path / "mini").mkdir()
    (tmp_path / "mini" / "__init__.py").write_text("")
    (tmp_path / "mini" / "tasks.py").write_text(TASKS)
    (tmp_path / "mini_settings.py").write_text(SETTINGS)

    def manage(*args: str, modules: str = "") -> subprocess.CompletedProcess[str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("DURABLE_JOBS_")}
        env.pop("DATABASE_URL", None)
        env.update(
            PYTHONPATH=os.pathsep.join([str(tmp_path), str(REPO_DIR)]),
            DJANGO_SETTINGS_MODULE="mini_settings",
            MINI_DB=str(tmp_path / "db.sqlite3"),
            MINI_MODULES=modules,
        )
        return subprocess.run(
            [sys.executable, "-m", "django", *args],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=180,
        )

    assert manage("migrate").returncode == 0
    return manage


ENQUEUE = "from django_durable_jobs import enqueue; print(enqueue('mini.welcome', 7).id)"
STATUS = (
    "from django_durable_jobs.models import JobRun; r = JobRun.objects.get();"
    "print(r.status, r.error_code); print(r.error)"
)


def test_jobs_in_tasks_py_are_not_found_and_every_message_says_where_to_look(project):
    banner = project("runjobs", "--burst")
    assert banner.returncode == 0
    assert "WARNING django_durable_jobs.worker 0 job(s) registered" in banner.stderr
    assert "each installed app's jobs.py (found: none)" in banner.stderr
    not_imported = 'not imported: mini.tasks (add "tasks" to DURABLE_JOBS["JOB_MODULES"]'
    assert not_imported in banner.stderr
    assert "define it there" in banner.stderr  # no job found: what to do about it

    # Enqueued by a process that knows the job, executed by one that does not.
    assert project("shell", "--no-imports", "-c", ENQUEUE, modules="tasks").returncode == 0
    assert project("runjobs", "--burst").returncode == 0
    status, error = project("shell", "--no-imports", "-c", STATUS).stdout.splitlines()[:2]
    assert status == "failed X_JOB_UNKNOWN"
    assert "no job is registered as 'mini.welcome'" in error
    assert 'add its module name to DURABLE_JOBS["JOB_MODULES"]' in error
    assert not_imported in error  # the module it most likely is in, as the banner says


def test_job_modules_discovers_tasks_py_and_the_banner_lists_each_job(project):
    banner = project("runjobs", "--burst", modules="jobs,tasks")
    assert banner.returncode == 0
    assert "1 job(s) registered; jobs are imported from each installed app's jobs.py or " in (
        banner.stderr
    )
    assert "tasks.py (found: mini.tasks)" in banner.stderr
    assert "  job mini.welcome queue=default retries=2 backoff=0 timeout=1m" in banner.stderr
    assert "not imported" not in banner.stderr
    assert "define it there" not in banner.stderr  # jobs were found: nothing to define

    assert project("shell", "--no-imports", "-c", ENQUEUE, modules="tasks").returncode == 0
    assert project("runjobs", "--burst", modules="tasks").returncode == 0
    assert project("shell", "--no-imports", "-c", STATUS).stdout.startswith("succeeded ")


def test_enqueue_by_an_unknown_name_says_where_jobs_were_looked_for(project):
    typo = project(
        "shell",
        "--no-imports",
        "-c",
        "from django_durable_jobs import enqueue; enqueue('mini.welcom')",
    )
    assert "UnknownJob: no job is registered as 'mini.welcom'; jobs are imported from" in (
        typo.stderr
    )
    with_it = project(
        "shell",
        "-c",
        "from django_durable_jobs import enqueue; enqueue('mini.welcom')",
        modules="tasks",
    )
    assert "did you mean 'mini.welcome'?" in with_it.stderr


@pytest.mark.parametrize("checks", [[], ["--skip-checks"]], ids=["checks", "skip-checks"])
def test_a_job_beside_the_settings_that_the_urlconf_imports_is_known_to_the_worker(
    project, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, checks: list[str]
):
    """``mysite/jobs.py`` outside every app, imported by the views: the worker knew it
    only because Django's URL check imports the URLconf, so with ``--skip-checks`` every
    run the web process enqueued failed with X_JOB_UNKNOWN. runjobs imports it itself."""
    files = {
        "mysite/__init__.py": "",
        "mysite/urls.py": "from mysite import views  # noqa: F401\n\nurlpatterns = []\n",
        "mysite/views.py": "from mysite.jobs import send_welcome  # noqa: F401\n",
        "mysite/jobs.py": (
            "from django_durable_jobs import job\n\n"
            "@job(name='mysite.send_welcome')\n"
            "def send_welcome(ctx, user_id):\n"
            "    return ctx.step.run('send', lambda: user_id)\n"
        ),
    }
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(exist_ok=True)
        (tmp_path / name).write_text(text)
    monkeypatch.setenv("MINI_URLCONF", "mysite.urls")
    enqueue = "import mysite.views; from mysite.jobs import send_welcome; send_welcome.enqueue(7)"
    assert project("shell", "--no-imports", "-c", enqueue).returncode == 0

    banner = project("runjobs", "--burst", *checks)
    assert banner.returncode == 0, banner.stderr
    assert "  job mysite.send_welcome " in banner.stderr
    assert project("shell", "--no-imports", "-c", STATUS).stdout.startswith("succeeded ")


def test_a_urlconf_that_cannot_be_imported_is_said_and_the_worker_still_starts(
    project, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setenv("MINI_URLCONF", "mysite.nowhere")
    banner = project("runjobs", "--burst", "--skip-checks")
    assert banner.returncode == 0, banner.stderr
    assert "cannot import the URLconf 'mysite.nowhere' (ModuleNotFoundError" in banner.stderr
