"""docs/tutorial/first-flow.md, followed as written in an empty directory: every command of
its shell blocks runs, in order, and every file it shows is written from the page itself,
so the page and what it does cannot drift apart.

A python block whose first line names a file (``# newsletter/jobs.py``) is that file;
``# mysite/settings.py, at the end`` is added at the end of it. A shell block whose first
line is ``# in a second terminal`` runs in the background until the section ends. The few
commands that cannot run here stand for something the test has already (``STAND_INS``):
the package is installed in this interpreter (``sys.executable`` stands for the
tutorial's ``python``), and the PostgreSQL database is one of the test's own on
DATABASE_URL's server, named in the settings after the tutorial's ``DATABASES``.
"""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from django.db import connection

from tests.conftest import own_sqlite_file
from tests.docs_pages import ROOT, blocks, commands

PAGE = ROOT / "docs/tutorial/first-flow.md"
#: The heading from which on the tutorial moves to PostgreSQL.
POSTGRESQL = "Move to PostgreSQL"

#: Commands of the page that stand for what the test has already, and why.
STAND_INS = {
    "python -m venv .venv": "the test's interpreter is the environment",
    "source .venv/bin/activate": "the test's interpreter is the environment",
    "pip install django-durable-jobs": "installed in the test's interpreter",
    "pip install 'django-durable-jobs[postgres]'": "installed in the test's interpreter",
    "createdb mysite": "the test creates a database of its own",
}

#: What the page shows a command's output to say, in the page's order: (the command's
#: start, a line of its output). Each is checked when the command runs.
SHOWS = [
    ("python manage.py runjobs --burst", "email to ada@example.com: Please confirm"),
    ("python manage.py jobs list", "newsletter.subscribe  waiting"),
    ("python manage.py jobs publish", "published subscription.confirmed key=ada@example.com"),
    ("python manage.py runjobs --burst", "email to ada@example.com: Welcome to the newsletter"),
    ("python manage.py jobs show", 'result {"subscribed": true}'),
    ("python manage.py test newsletter", "Ran 2 tests"),
]


@dataclass
class Reader:
    """Someone following the page in ``home``, with a shell in the project."""

    home: Path
    env: dict[str, str]
    database: dict[str, str] | None = None  # the PostgreSQL server and database, if any
    background: list[tuple[subprocess.Popen[str], Path]] = field(default_factory=list)
    skipped: set[str] = field(default_factory=set)
    shows: list[tuple[str, str]] = field(default_factory=lambda: list(SHOWS))

    def argv(self, command: str) -> list[str]:
        words = shlex.split(command)
        if words[0] == "python":
            return [sys.executable, *words[1:]]
        if words[0] == "django-admin":
            return [sys.executable, "-m", "django", *words[1:]]
        return words

    def run(self, command: str) -> str:
        if command in STAND_INS:
            self.skipped.add(command)
            return ""
        argv = self.argv(command)
        if argv[2:4] == ["jobs", "show"]:  # the page's run id stands for the run started
            argv[4] = self.run_id()
        output = self.output_of(command, argv)
        if self.shows and command.startswith(self.shows[0][0]):
            shown = self.shows.pop(0)[1]
            assert shown in output, f"{command}: the page shows {shown!r}\n{output}"
        return output

    def output_of(self, command: str, argv: list[str]) -> str:
        retry_until = time.monotonic() + (30 if self.background else 0)
        while True:
            done = subprocess.run(
                argv, cwd=self.home, env=self.env, capture_output=True, text=True, timeout=120
            )
            assert done.returncode == 0, f"{command}\n{done.stdout}\n{done.stderr}"
            output = done.stdout + done.stderr
            # With a worker in the background, a listing waits for it as a reader would.
            if "jobs list --status succeeded" not in command or "newsletter.subscribe" in output:
                break
            assert time.monotonic() < retry_until, f"{command}: nothing succeeded\n{output}"
            time.sleep(0.2)
        return output

    def run_id(self) -> str:
        """The newest run's id, as ``jobs list`` prints it first."""
        listed = self.output_of("jobs list", self.argv("python manage.py jobs list"))
        return listed.splitlines()[1].split()[0]

    def start(self, command: str) -> None:
        log = self.home / f"background-{len(self.background)}.log"
        with log.open("w") as out:
            process = subprocess.Popen(
                self.argv(command), cwd=self.home, env=self.env, stdout=out, stderr=out, text=True
            )
        self.background.append((process, log))

    def stop_background(self) -> list[str]:
        """Ctrl-C to each background command, as the page says; their logs."""
        logs = []
        for process, log in self.background:
            process.send_signal(signal.SIGINT)
            assert process.wait(timeout=60) == 0, log.read_text()
            logs.append(log.read_text())
        self.background.clear()
        return logs

    def write(self, code: str) -> None:
        first, _, rest = code.partition("\n")
        match = re.fullmatch(r"# (\S+\.py)(, at the end)?", first)
        assert match, f"a file block starts with its path: {first!r}"
        path = self.home / match.group(1)
        if match.group(2):
            path.write_text(path.read_text() + "\n" + rest)
            if match.group(1).endswith("settings.py") and "DATABASES" in rest:
                self.point_at_test_database(path)
        else:
            path.write_text(rest)

    def point_at_test_database(self, settings_file: Path) -> None:
        """The page's ``DATABASES``, on the test's server and database."""
        assert self.database is not None, "the page moves to PostgreSQL: no server given"
        override = {key: self.database[key] for key in ("NAME", "USER", "PASSWORD", "HOST")}
        override["PORT"] = str(self.database["PORT"])
        text = settings_file.read_text()
        settings_file.write_text(text + f'\nDATABASES["default"].update({override!r})\n')


def follow(reader: Reader, *, until: str | None) -> list[str]:
    """Follow the page from the top to the heading ``until`` (or its end); return the
    logs of the commands that ran in the background, stopped at the end of a section."""
    logs: list[str] = []
    section = ""
    for block in blocks(PAGE):
        if block.heading != section and reader.background:
            logs += reader.stop_background()
        section = block.heading
        if until is not None and section == until:
            break
        if block.lang == "python":
            reader.write(block.code)
        elif block.lang == "bash":
            lines = commands(block.code)
            if block.code.startswith("# in a second terminal"):
                for command in lines:
                    reader.start(command)
            else:
                for command in lines:
                    reader.run(command)
    logs += reader.stop_background()
    return logs


def reader_in(tmp_path: Path, database: dict[str, str] | None = None) -> Reader:
    unset = ("DJANGO_SETTINGS_MODULE", "DATABASE_URL")
    env = {k: v for k, v in os.environ.items() if k not in unset}
    home = tmp_path / "tutorial"
    home.mkdir()
    return Reader(home=home, env=env, database=database)


@pytest.mark.slow
@pytest.mark.subprocess
@own_sqlite_file
def test_the_tutorial_runs_as_written_on_sqlite(tmp_path: Path) -> None:
    reader = reader_in(tmp_path)
    follow(reader, until=POSTGRESQL)
    assert reader.shows == []  # every output the page shows was seen
    assert reader.skipped == {c for c in STAND_INS if "postgres" not in c and "createdb" not in c}


@pytest.fixture
def postgresql_database() -> Iterator[dict[str, str]]:
    """A database of the test's own on the server the suite uses, dropped after."""
    import psycopg

    server = dict(connection.settings_dict)
    server["NAME"] = f"tutorial_{uuid.uuid4().hex[:12]}"
    params = {
        "dbname": "postgres",
        "user": server["USER"],
        "password": server["PASSWORD"] or None,
        "host": server["HOST"] or None,
        "port": server["PORT"] or None,
    }
    with psycopg.connect(**params, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{server["NAME"]}"')
    yield server
    with psycopg.connect(**params, autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{server["NAME"]}" WITH (FORCE)')


@pytest.mark.slow
@pytest.mark.subprocess
@pytest.mark.postgres(reason="the tutorial's second half moves to PostgreSQL")
@pytest.mark.psycopg3(reason="the tutorial installs the postgres extra: psycopg 3")
def test_the_tutorial_moves_to_postgresql_and_a_listening_worker_runs_the_flow(
    tmp_path: Path, postgresql_database: dict[str, str]
) -> None:
    reader = reader_in(tmp_path, postgresql_database)
    [worker_log] = follow(reader, until=None)
    assert reader.shows == []
    assert reader.skipped == set(STAND_INS)
    assert "database=postgresql wake=listen" in worker_log
    assert "email to grace@example.com: Welcome to the newsletter" in worker_log
