"""The enqueue -> start floor of this machine: what a queue with no framework pays.

    BENCH_DB=bench_latency .venv/py312-dj61/bin/python benchmarks/floor.py [--jobs 30]

The start-latency probe (``ours.measure_latency``: random 0.2-1.2 s gaps, ``t0`` taken
before the enqueue) run with raw psycopg on both sides: a prepared one-row INSERT
committed durably, its NOTIFY from a statement trigger as ours, and a process that
LISTENs and, on each notification, claims with one ``UPDATE ... FOR UPDATE SKIP
LOCKED ... RETURNING`` committed lazily, then writes ``time.time() - t0``. No Django, no
engine, no job function: the durable commit, the notification and the claim's round
trip on an idle machine, which no PostgreSQL queue here can beat. Ours minus this is
what our Python costs between an ``enqueue()`` and the job's first line.

The table is its own (``bench_floor``), in the benchmark database.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

FLOOR_JOBS = int(os.environ.get("FLOOR_JOBS", "30"))

SCHEMA = """
DROP TABLE IF EXISTS bench_floor;
CREATE TABLE bench_floor (
    id bigserial PRIMARY KEY, status text NOT NULL DEFAULT 'queued', t0 float8 NOT NULL,
    owner text, lease_until timestamptz
);
CREATE INDEX bench_floor_queued ON bench_floor (id) WHERE status = 'queued';
CREATE OR REPLACE FUNCTION bench_floor_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN PERFORM pg_notify('bench_floor', ''); RETURN NULL; END $$;
CREATE TRIGGER bench_floor_enqueued AFTER INSERT ON bench_floor
    FOR EACH STATEMENT EXECUTE FUNCTION bench_floor_notify();
"""
ENQUEUE = "INSERT INTO bench_floor (t0) VALUES (%s)"
CLAIM = """SET LOCAL synchronous_commit TO off;
UPDATE bench_floor SET status = 'running', owner = 'floor', lease_until = now() + '1 min'
WHERE id = (SELECT id FROM bench_floor WHERE status = 'queued' ORDER BY id
            LIMIT 1 FOR UPDATE SKIP LOCKED)
RETURNING t0"""


def dsn() -> str:
    """The benchmark database's libpq connection string."""
    from django.conf import settings
    from psycopg.conninfo import make_conninfo

    from benchmarks.db import pg_params

    return make_conninfo(**pg_params(settings.DATABASES["default"]["NAME"]))


def measure_floor(jobs: int = FLOOR_JOBS) -> float:
    """Median ms from ``t0`` to the claimed row in the listening process."""
    import psycopg

    from benchmarks.harness import WORK

    out = WORK / "floor.txt"
    out.write_text("")
    with psycopg.connect(dsn(), autocommit=True) as conn:
        conn.execute(SCHEMA)
        listener = subprocess.Popen([sys.executable, __file__, "--listen", dsn(), str(out)])
        try:
            time.sleep(1.0)  # connected and listening
            for i in range(jobs):
                time.sleep(random.uniform(0.2, 1.2))
                conn.execute(ENQUEUE, (time.time(),), prepare=True)
                deadline = time.time() + 30
                while len(out.read_text().split()) < i + 1:
                    if time.time() > deadline or listener.poll() is not None:
                        raise RuntimeError(f"floor job {i} was not claimed within 30 s")
                    time.sleep(0.002)
        finally:
            listener.kill()
            listener.wait()
        conn.execute("DROP TABLE bench_floor; DROP FUNCTION bench_floor_notify()")
    return statistics.median(float(x) * 1000 for x in out.read_text().split())


def listen(dsn: str, out: Path) -> None:
    """The floor's worker: LISTEN, claim one row per notification, write its latency."""
    import psycopg

    waker = psycopg.connect(dsn, autocommit=True)
    waker.execute("LISTEN bench_floor")
    claims = psycopg.connect(dsn, autocommit=True)
    with open(out, "a", buffering=1) as latencies:
        while True:
            for _ in waker.notifies(stop_after=1):
                break
            cursor: Any = claims.cursor()
            cursor.execute(CLAIM)
            cursor.nextset()
            for (t0,) in cursor.fetchall():
                latencies.write(f"{time.time() - t0}\n")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--jobs", type=int, default=FLOOR_JOBS)
    parser.add_argument("--listen", nargs=2, metavar=("DSN", "FILE"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.listen:
        listen(args.listen[0], Path(args.listen[1]))
        return 0
    import django

    from benchmarks.db import recreate_db
    from benchmarks.harness import WORK

    WORK.mkdir(parents=True, exist_ok=True)
    recreate_db()
    django.setup()
    print(f"enqueue -> start floor p50: {measure_floor(args.jobs):.2f} ms")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "benchmarks.settings")
    sys.exit(main())
