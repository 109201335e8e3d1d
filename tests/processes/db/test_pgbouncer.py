"""Behind a transaction-pooling PgBouncer (a real one, on a port of its own), with the
settings a user who has not read Django's note on it keeps: no
``DISABLE_SERVER_SIDE_CURSORS``. Two workers and an application process of four
threads reach the test database through it only; every enqueue (in and out of
``atomic()``), every event and every step must land once. Three enqueues in four
failed there ("prepared statement ... already exists") before a pooler's connections
sent their statements unprepared (``statements.pooled``).

A second test gives the workers a direct connection to LISTEN on
(``DURABLE_JOBS["LISTEN_DATABASE"]``): runs sleep, wait and are woken once each.

Skipped without the ``pgbouncer`` binary (``scripts/system-packages`` installs it).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.db import connection

from django_durable_jobs import publish_event
from django_durable_jobs.db.postgresql.listen import APPLICATION_NAME, CHANNEL
from django_durable_jobs.models import JobRun, RunStatus
from tests.processes.worker.test_worker import (  # noqa: F401 - `workers` is a fixture
    REPO_DIR,
    Workers,
    wait_until,
    workers,
)
from tests.testapp.jobs import pooled_nap
from tests.testapp.models import Effect, Execution

pytestmark = [
    pytest.mark.subprocess,
    pytest.mark.django_db(transaction=True),
    pytest.mark.postgres(reason="PgBouncer pools PostgreSQL connections"),
    pytest.mark.psycopg3(reason="the workers' psycopg 3 path (prepared statements, LISTEN)"),
]

RUNS = 40  # of each kind: tests.pooled (sync, an event) and tests.async_logged
BINARY = shutil.which("pgbouncer") or next(
    (path for path in ("/usr/sbin/pgbouncer", "/usr/bin/pgbouncer") if os.path.exists(path)), None
)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def pgbouncer(transactional_db: None) -> Iterator[str]:
    """A transaction-pooling PgBouncer in front of the test database: its URL."""
    if BINARY is None:
        pytest.skip("pgbouncer is not installed (apt-get install pgbouncer)")
    settings = connection.settings_dict
    user, port = settings["USER"] or "postgres", free_port()
    # Readable by the user it drops to when started as root (it refuses to run as root).
    home = Path(tempfile.mkdtemp(prefix="durable-pgbouncer-"))
    home.chmod(0o755)
    (home / "users.txt").write_text(f'"{user}" ""\n')
    (home / "pgbouncer.ini").write_text(
        f"""[databases]
* = host={settings["HOST"] or "127.0.0.1"} port={settings["PORT"] or 5432}
[pgbouncer]
listen_addr = 127.0.0.1
listen_port = {port}
auth_type = trust
auth_file = {home / "users.txt"}
pool_mode = transaction
default_pool_size = 3
max_client_conn = 200
ignore_startup_parameters = extra_float_digits,options
"""
    )
    for path in home.iterdir():
        path.chmod(0o644)
    as_root = ["-u", "nobody"] if os.geteuid() == 0 else []
    log = (home / "pgbouncer.log").open("wb")
    proc = subprocess.Popen([BINARY, *as_root, str(home / "pgbouncer.ini")], stdout=log, stderr=log)
    try:
        wait_until(lambda: _accepts(port), timeout=30, what="pgbouncer to listen")
        yield f"postgres://{user}@127.0.0.1:{port}/{settings['NAME']}"
    finally:
        proc.terminate()  # its server connections go: the test database can be dropped
        proc.wait(timeout=30)
        log.close()
        shutil.rmtree(home, ignore_errors=True)


def _accepts(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
    except OSError:
        return False
    return True


def client(url: str, *args: str) -> subprocess.CompletedProcess[str]:
    """``tests/processes/pooled_client.py`` through the pooler."""
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "tests.settings",
        "DATABASE_URL": url,
        "DURABLE_JOBS_TEST_DB_NAME": str(connection.settings_dict["NAME"]),
    }
    return subprocess.run(
        [sys.executable, "-m", "tests.processes.pooled_client", *args],
        cwd=REPO_DIR,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_enqueues_events_and_steps_through_a_transaction_pooling_pgbouncer(
    pgbouncer: str,
    workers: Workers,  # noqa: F811 - the fixture imported above; set up after the pooler,
    # so its workers are stopped before the pooler is
) -> None:
    through = {"DATABASE_URL": pgbouncer}
    pool = [workers.start(f"pooled{i}", "--async-concurrency", "10", env=through) for i in range(2)]
    for worker in pool:
        workers.wait_started(worker)
    enqueued = client(pgbouncer, "enqueue", str(RUNS))
    assert enqueued.returncode == 0, enqueued.stdout + enqueued.stderr
    assert JobRun.objects.count() == 2 * RUNS
    pooled = JobRun.objects.filter(job_name="tests.pooled")
    wait_until(
        lambda: pooled.filter(status=RunStatus.WAITING).count() == RUNS,
        timeout=120,
        what=f"{RUNS} runs waiting for their event",
        workers=pool,
    )
    published = client(pgbouncer, "publish")
    assert published.returncode == 0, published.stdout + published.stderr
    wait_until(
        lambda: JobRun.objects.filter(status=RunStatus.SUCCEEDED).count() == 2 * RUNS,
        timeout=120,
        what="every run to succeed",
        workers=pool,
        detail=lambda: str(Counter(JobRun.objects.values_list("job_name", "status"))),
    )
    for worker in pool:
        assert worker.terminate() == 0
    ids = {str(pk) for pk in pooled.values_list("pk", flat=True)}
    for name in ("pooled-before", "pooled-after"):
        counted = Counter(Effect.objects.filter(name=name).values_list("run_id", flat=True))
        assert set(counted) == ids and set(counted.values()) == {1}, name
    results = sorted(str(r and r["key"]) for r in pooled.values_list("result", flat=True))
    assert results == sorted(f"k{n}" for n in range(RUNS))
    assert Execution.objects.count() == RUNS  # each async run executed once
    logs = "".join(worker.log() for worker in pool)
    assert "reached through a connection pooler" in logs
    assert "LISTEN connection goes through a connection pooler" in logs
    assert logs.count("wake=polling") == len(pool)  # it found the pooler before it listened
    assert "database error" not in logs
    assert "does not exist" not in logs  # no statement was prepared on a pooled connection


def test_runs_sleep_wait_and_wake_once_through_pgbouncer_listening_directly(
    pgbouncer: str,
    workers: Workers,  # noqa: F811 - the fixture imported above, set up after the pooler
) -> None:
    """``LISTEN_DATABASE``: the workers' statements go through the pooler, their LISTEN
    to PostgreSQL directly (the test's own database settings), so a NOTIFY sent by a
    pooled connection's commit reaches them. Every run sleeps, waits for its event and
    writes each side effect once, with no named statement lost on the way."""
    direct = connection.settings_dict
    listen_url = (
        f"postgres://{direct['USER'] or 'postgres'}@{direct['HOST'] or '127.0.0.1'}:"
        f"{direct['PORT'] or 5432}/{direct['NAME']}"
    )
    through = {"DATABASE_URL": pgbouncer, "DURABLE_JOBS_TEST_LISTEN_URL": listen_url}
    pool = [workers.start(f"listening{i}", "--concurrency", "2", env=through) for i in range(2)]
    for worker in pool:
        workers.wait_started(worker, processes=2)
    listening = _listening()
    assert len(listening) == 4, listening  # one direct LISTEN connection per worker process
    naps = [pooled_nap.enqueue(f"n{number}").pk for number in range(RUNS)]
    runs = JobRun.objects.filter(pk__in=naps)
    wait_until(
        lambda: runs.filter(status=RunStatus.WAITING).count() == RUNS,
        timeout=60,
        what=f"{RUNS} runs to sleep, then wait for their event",
        workers=pool,
        detail=lambda: str(Counter(runs.values_list("status", flat=True))),
    )
    for number in range(RUNS):
        publish_event("pooled.nap", {"key": f"n{number}"}, key=f"n{number}")
    wait_until(
        lambda: runs.filter(status=RunStatus.SUCCEEDED).count() == RUNS,
        timeout=60,
        what="every run to succeed",
        workers=pool,
        detail=lambda: str(Counter(runs.values_list("status", flat=True))),
    )
    for worker in pool:
        assert worker.terminate() == 0
    ids = {str(pk) for pk in naps}
    for name in ("nap-before", "nap-after"):
        counted = Counter(Effect.objects.filter(name=name).values_list("run_id", flat=True))
        assert set(counted) == ids and set(counted.values()) == {1}, name
    logs = "".join(worker.log() for worker in pool)
    assert logs.count("wake=listen/notify") == 4
    assert "reached through a connection pooler" in logs  # the statements still were
    assert "LISTEN connection goes through" not in logs
    assert "database error" not in logs
    assert "does not exist" not in logs


def _listening() -> list[tuple[int, str]]:
    """The backends of the test database that LISTEN for the workers (their last
    statement), each a direct connection: PgBouncer's would be named by its clients'
    last use, and would not have listened."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pid, query FROM pg_stat_activity WHERE datname = current_database() "
            "AND application_name = %s AND query = %s",
            [APPLICATION_NAME, f"LISTEN {CHANNEL}"],
        )
        return list(cursor.fetchall())
