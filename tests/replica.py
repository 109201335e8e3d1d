"""A real streaming replica of the PostgreSQL server the tests use, for
``DURABLE_JOBS["READ_DATABASE"]``: ``pg_basebackup -R`` from the primary into a
temporary directory, started on a free port with ``pg_ctl``, stopped and removed at
the end of the session.

A physical replica copies the whole cluster, so the test database pytest created on
the primary is on the replica too (and stays in step with it): the ``replica`` alias
of tests/settings.py mirrors ``default``'s test database by name.

Skipped, with the reason, when the PostgreSQL binaries of the server's major version
are missing, when running as root without a ``postgres`` user to run them as (the
server refuses to run as root), or when the primary refuses replication connections
(its ``pg_hba.conf`` needs ``host replication all 127.0.0.1/32 trust``, which
``.ci/run`` adds; a reload applies it, no restart).
"""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.db import connections

ALIAS = "replica"
#: The settings a hot standby must have at least as high as its primary.
HOT_STANDBY_MINIMUMS = (
    "max_connections",
    "max_worker_processes",
    "max_wal_senders",
    "max_prepared_transactions",
    "max_locks_per_transaction",
)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _primary(query: str) -> list[tuple[object, ...]]:
    with connections["default"].cursor() as cursor:
        cursor.execute(query)
        return list(cursor.fetchall())


def _binaries(major: int) -> Path | None:
    """The directory of ``pg_basebackup`` and ``pg_ctl`` of the server's major version."""
    for folder in (Path(f"/usr/lib/postgresql/{major}/bin"), Path(f"/usr/pgsql-{major}/bin")):
        if (folder / "pg_ctl").exists() and (folder / "pg_basebackup").exists():
            return folder
    found = shutil.which("pg_ctl")
    if found is None or shutil.which("pg_basebackup") is None:
        return None
    version = subprocess.run([found, "--version"], capture_output=True, text=True).stdout
    return Path(found).parent if f" {major}." in version else None


def _as_server_user() -> list[str]:
    """The prefix that runs the server's binaries as a user PostgreSQL accepts."""
    if os.geteuid() != 0:
        return []
    if shutil.which("runuser") is None:
        pytest.skip("running as root without runuser: the replica's server cannot start")
    try:
        pwd.getpwnam("postgres")
    except KeyError:
        pytest.skip("running as root without a postgres user: the replica cannot start")
    return ["runuser", "-u", "postgres", "--"]


@pytest.fixture(scope="session")
def replica(django_db_setup: None, django_db_blocker: Any) -> Iterator[str]:
    """The alias of a streaming replica of the test database (``"replica"``)."""
    if connections["default"].vendor != "postgresql" or ALIAS not in connections.databases:
        pytest.skip("a streaming replica is PostgreSQL's")
    with django_db_blocker.unblock():
        major = int(str(_primary("SHOW server_version_num")[0][0])) // 10000
        minimums = _primary(
            "SELECT name, setting FROM pg_settings WHERE name IN "
            f"({', '.join(repr(name) for name in HOT_STANDBY_MINIMUMS)})"
        )
    binaries = _binaries(major)
    if binaries is None:
        pytest.skip(f"the PostgreSQL {major} binaries (pg_ctl, pg_basebackup) are not installed")
    prefix = _as_server_user()
    primary = connections["default"].settings_dict
    home = Path(tempfile.mkdtemp(prefix="durable-jobs-replica-"))
    if prefix:
        shutil.chown(home, user="postgres")
    data, port = home / "data", free_port()
    backup = subprocess.run(
        [
            *prefix,
            str(binaries / "pg_basebackup"),
            "--host", str(primary["HOST"] or "127.0.0.1"),
            "--port", str(primary["PORT"] or 5432),
            "--username", str(primary["USER"] or "postgres"),
            "--pgdata", str(data),
            "--write-recovery-conf",  # -R: standby.signal and primary_conninfo
            "--wal-method", "stream",
            "--checkpoint", "fast",
            "--no-password",
        "--no-sync",  # a throwaway copy: not worth waiting for the disk
        ],
        capture_output=True,
        text=True,
    )  # fmt: skip
    if backup.returncode != 0:
        shutil.rmtree(home, ignore_errors=True)
        if "pg_hba.conf" in backup.stderr:
            pytest.skip(
                "the primary refuses replication connections: add "
                "'host replication all 127.0.0.1/32 trust' to its pg_hba.conf and "
                f"SELECT pg_reload_conf() ({backup.stderr.strip()})"
            )
        raise RuntimeError(f"pg_basebackup failed: {backup.stderr}")
    conf = [
        f"port = {port}",
        "listen_addresses = '127.0.0.1'",
        f"unix_socket_directories = '{home}'",
        "hot_standby = on",
        "fsync = off",  # thrown away at the end of the session
        # Replay is paused by tests for minutes at most: never cancel their reads.
        "max_standby_streaming_delay = -1",
        *(f"{name} = {setting}" for name, setting in minimums),
    ]
    hba = ["local all all trust", "host all all 127.0.0.1/32 trust"]
    for name, lines in (("postgresql.conf", conf), ("pg_hba.conf", hba)):
        (data / name).write_text("\n".join(lines) + "\n")  # pg_basebackup's files: root may
    if prefix:
        subprocess.run(["chown", "-R", "postgres:", str(home)], check=True)
    ctl = [*prefix, str(binaries / "pg_ctl"), "--pgdata", str(data)]
    log = home / "replica.log"
    try:
        started = subprocess.run(
            [*ctl, "--log", str(log), "--wait", "--timeout", "60", "start"],
            capture_output=True,
            text=True,
        )
        if started.returncode != 0:
            raise RuntimeError(f"the replica did not start: {_tail(log)}")
        settings = connections[ALIAS].settings_dict
        settings["PORT"] = str(port)
        connections[ALIAS].close()
        yield ALIAS
    finally:
        connections[ALIAS].close()
        subprocess.run([*ctl, "--mode", "immediate", "--wait", "stop"], capture_output=True)
        shutil.rmtree(home, ignore_errors=True)


def _tail(log: Path) -> str:
    try:
        return "\n".join(log.read_text().splitlines()[-20:])
    except OSError:
        return "(no log)"


def caught_up(alias: str = ALIAS, *, timeout: float = 30) -> None:
    """Wait until the replica has replayed everything the primary wrote until now."""
    with connections["default"].cursor() as cursor:
        cursor.execute("SELECT pg_current_wal_lsn()")
        (target,) = cursor.fetchone()
    deadline = time.monotonic() + timeout
    with connections[alias].cursor() as cursor:
        while True:
            cursor.execute("SELECT pg_wal_lsn_diff(pg_last_wal_replay_lsn(), %s) >= 0", [target])
            if cursor.fetchone()[0]:
                return
            if time.monotonic() > deadline:
                raise AssertionError(f"the replica did not replay up to {target} in {timeout}s")
            time.sleep(0.05)


def replay(alias: str, *, paused: bool) -> None:
    """Pause or resume the replica's replay of the primary's changes."""
    with connections[alias].cursor() as cursor:
        cursor.execute(
            "SELECT pg_wal_replay_pause()" if paused else "SELECT pg_wal_replay_resume()"
        )
