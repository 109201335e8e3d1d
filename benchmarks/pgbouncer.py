"""A PgBouncer of the benchmark's own, in transaction pooling mode, in front of the
benchmark's PostgreSQL (benchmarks/workers.py): its config in a temporary directory,
trust authentication, on a free port (6433 when it is free)."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

BINARY = shutil.which("pgbouncer") or next(
    (path for path in ("/usr/sbin/pgbouncer", "/usr/bin/pgbouncer") if os.path.exists(path)), None
)


def free_port(preferred: int = 6433) -> int:
    """``preferred`` when nothing listens there, else one the kernel picks."""
    for port in (preferred, 0):
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return int(sock.getsockname()[1])
    raise RuntimeError("no free port")


@dataclass
class PgBouncer:
    port: int
    home: Path
    proc: subprocess.Popen[bytes]

    def show(self, what: str) -> list[dict[str, Any]]:
        """``SHOW <what>`` on the admin console (``POOLS``, ``CLIENTS``, ``SERVERS``)."""
        import psycopg

        with psycopg.connect(
            host="127.0.0.1", port=self.port, user="postgres", dbname="pgbouncer", autocommit=True
        ) as conn:
            # The console speaks the simple query protocol only: a client-side cursor.
            cursor = psycopg.ClientCursor(conn)
            cursor.execute(f"SHOW {what}")
            names = [column.name for column in cursor.description or []]
            return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]

    def cpu_seconds(self) -> float:
        """The CPU time PgBouncer (one thread) has used so far (``/proc``, Linux)."""
        fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        shutil.rmtree(self.home, ignore_errors=True)


def start(host: str, port: int, pool_size: int, max_clients: int = 1000) -> PgBouncer:
    """A transaction-pooling PgBouncer in front of ``host:port`` (every database), at
    most ``pool_size`` server connections per database and user."""
    if BINARY is None:
        raise RuntimeError("pgbouncer is not installed (apt-get install pgbouncer)")
    listen = free_port()
    home = Path(tempfile.mkdtemp(prefix="bench-pgbouncer-"))
    home.chmod(0o755)  # readable by the user it drops to when started as root
    (home / "users.txt").write_text('"postgres" ""\n')
    (home / "pgbouncer.ini").write_text(
        f"""[databases]
* = host={host} port={port}
[pgbouncer]
listen_addr = 127.0.0.1
listen_port = {listen}
unix_socket_dir =
auth_type = trust
auth_file = {home / "users.txt"}
admin_users = postgres
pool_mode = transaction
default_pool_size = {pool_size}
max_client_conn = {max_clients}
ignore_startup_parameters = extra_float_digits,options
"""
    )
    for path in home.iterdir():
        path.chmod(0o644)
    as_root = ["-u", "nobody"] if os.geteuid() == 0 else []
    with open(home / "pgbouncer.log", "wb") as log:
        proc = subprocess.Popen(
            [BINARY, *as_root, str(home / "pgbouncer.ini")], stdout=log, stderr=log
        )
    bouncer = PgBouncer(listen, home, proc)
    deadline = time.monotonic() + 30
    while True:
        try:
            socket.create_connection(("127.0.0.1", listen), timeout=1).close()
            return bouncer
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                text = (home / "pgbouncer.log").read_text(errors="replace")
                bouncer.stop()
                raise RuntimeError(f"pgbouncer did not start:\n{text}") from None
            time.sleep(0.1)
