"""The peers: run each benchmark script of ``shared/bench`` in its own virtualenv, read
the JSON it writes, and pick the metrics that match our table's columns by name.

A peer that cannot be set up or fails becomes a row of ``n/a`` with the reason; the run
goes on. Each script runs once (``RUNS=1``) with our ``N`` and ``NB`` on the same
PostgreSQL server, so the ratios within one invocation compare like with like.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.harness import REPO, WORK, say
from benchmarks.report import Row

PEER_DIR = Path(
    os.environ.get("PEERBENCH_DIR", str(Path.home() / ".cache" / "peerbench"))
).expanduser()
PEER_OUT = Path(os.environ.get("PEERBENCH_OUT", str(PEER_DIR / "results"))).expanduser()
PEER_SCRIPTS = Path(os.environ.get("PEERBENCH_SCRIPTS", str(REPO.parent / "shared" / "bench")))


@dataclass(frozen=True)
class Peer:
    system: str  # common.Results' name: <system>.json
    venv: str  # setup.sh's name
    script: str
    metrics: dict[str, str]  # our column -> their metric name
    notes: tuple[str, ...] = ()


PEERS = (
    Peer(
        "procrastinate",
        "pr",
        "bench_procrastinate.py",
        {
            "enqueue": "enqueue one-by-one (defer) jobs/s",
            "bulk": "enqueue bulk (batch_defer x1000) jobs/s",
            "w1": "process 1 worker conc=1 jobs/s",
            "w2": "process 2 workers conc=1 jobs/s",
            "latency": "latency enqueue->start ms (LISTEN/NOTIFY)",
        },
        ("bulk = batch_defer of 1000", "latency: LISTEN/NOTIFY"),
    ),
    Peer(
        "django-tasks-db",
        "dj",
        "bench_django_tasks_db.py",
        {
            "enqueue": "enqueue one-by-one jobs/s",
            "bulk": "enqueue bulk_create jobs/s",
            "w1": "process 1 worker (CONN_MAX_AGE=600) jobs/s",
            "w2": "process 2 workers (CONN_MAX_AGE=600) jobs/s",
            "latency": "latency enqueue->start ms (interval=1s)",
        },
        (
            "workers with CONN_MAX_AGE=600 (persistent, like ours)",
            "bulk = bulk_create on its model (not a public API)",
            "latency: db_worker --interval 1s polling",
        ),
    ),
    Peer(
        "pgqueuer",
        "pgq",
        "bench_pgqueuer.py",
        {
            "enqueue": "enqueue one-by-one jobs/s",
            "bulk": "enqueue bulk (lists x1000) jobs/s",
            "w1": "process 1 worker (default batch 10) jobs/s",
            "w2": "process 2 workers (default) jobs/s",
            "latency": "latency enqueue->start ms (LISTEN/NOTIFY)",
        },
        ("claims 10 jobs per statement, batches completions", "latency: LISTEN/NOTIFY"),
    ),
    Peer(
        "absurd",
        "ab",
        "bench_absurd.py",
        {
            "enqueue": "A enqueue one-by-one (spawn) jobs/s",
            "bulk": "A enqueue in one txn (spawn x N, 1 COMMIT) jobs/s",
            "w1": "A process 1 worker conc=1 jobs/s",
            "w2": "A process 2 workers conc=1 jobs/s",
            "latency": "A latency enqueue->start ms (poll 0.25s)",
            "steps": "B 1 worker conc=1 steps/s",
        },
        ("bulk = N spawns in one transaction", "latency: polls every 0.25s"),
    ),
)

#: procrastinate's I/O workload (its script runs it when IO_N is set), beside ours.
PROCRASTINATE_IO = "IO 100ms awaits, 1 worker conc=100 jobs/s"
#: Extra figures worth a footnote: (system, metric, label).
PEER_EXTRAS = (
    (
        "django-tasks-db",
        "process 1 worker (CONN_MAX_AGE=0 default) jobs/s",
        "1 worker, CONN_MAX_AGE=0",
    ),
    (
        "django-tasks-db",
        "latency enqueue->start ms (interval=0.1s)",
        "latency with --interval 0.1s",
    ),
    ("procrastinate", "process 1 worker conc=4 jobs/s", "1 worker --concurrency 4"),
    ("procrastinate", PROCRASTINATE_IO, "I/O workload, 1 worker conc=100, jobs/s"),
    ("absurd", "A process 1 worker conc=4 jobs/s", "1 worker conc=4"),
    ("absurd", "B 2 workers conc=1 steps/s", "10-step, 2 workers, steps/s"),
)


def venv_python(peer: Peer) -> Path:
    return PEER_DIR / peer.venv / "bin" / "python"


def venv_ok(peer: Peer) -> bool:
    python = venv_python(peer)
    if not python.exists():
        return False
    return subprocess.run([python, "-c", "pass"], capture_output=True).returncode == 0


def ensure_venvs(peers: Sequence[Peer], setup: bool) -> dict[str, str]:
    """Venvs that are missing after setup.sh tried -> the reason."""
    missing = [p for p in peers if not venv_ok(p)]
    reasons: dict[str, str] = {}
    if missing and setup and (PEER_SCRIPTS / "setup.sh").exists():
        names = [p.venv for p in missing]
        say(f"peers: creating venvs {names} with setup.sh (uses PyPI, a few minutes)")
        done = subprocess.run(
            ["bash", str(PEER_SCRIPTS / "setup.sh"), *names],
            capture_output=True,
            text=True,
            env={**os.environ, "PEERBENCH_DIR": str(PEER_DIR)},
        )
        tail = (done.stdout + done.stderr).strip().splitlines()[-3:]
        for p in missing:
            if not venv_ok(p):
                reasons[p.system] = (
                    f"venv {PEER_DIR / p.venv} missing; setup.sh exited {done.returncode}: "
                    + " | ".join(tail)
                )
    else:
        for p in missing:
            why = "setup skipped (--no-setup)" if not setup else f"no {PEER_SCRIPTS}/setup.sh"
            reasons[p.system] = f"venv {PEER_DIR / p.venv} missing; {why}"
    return reasons


def run_script(python: Path, script: str, env: dict[str, str], log: Path, timeout: float) -> int:
    """A ``shared/bench`` script run by ``python`` (its venv's), everything it prints
    into ``log``; its exit code, -1 if it ran past ``timeout`` seconds."""
    with open(log, "w") as out:
        try:
            return subprocess.run(
                [str(python), str(PEER_SCRIPTS / script)],
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=PEER_SCRIPTS,
                env=env,
                timeout=timeout,
            ).returncode
        except subprocess.TimeoutExpired:
            return -1


def run_peer(peer: Peer, n: int, nb: int) -> tuple[Row, dict[str, Any]]:
    row = Row(peer.system, system=peer.system)
    result = PEER_OUT / f"{peer.system}.json"
    result.unlink(missing_ok=True)
    log = WORK / f"peer_{peer.system}.log"
    env = {
        **os.environ,
        "N": str(n),
        "NB": str(nb),
        "RUNS": "1",
        "PEERBENCH_DIR": str(PEER_DIR),
        "PEERBENCH_OUT": str(PEER_OUT),
        # procrastinate's script adds the I/O workload (2,000 awaits of 100 ms, conc 100).
        "IO_N": os.environ.get("IO_N", "2000"),
        "IO_CONC": os.environ.get("IO_CONC", "100"),
    }
    env.pop("DJANGO_SETTINGS_MODULE", None)
    env.pop("PYTHONPATH", None)
    say(f"peers: {peer.system} (log {log})")
    code = run_script(venv_python(peer), peer.script, env, log, timeout=3600)
    if code != 0 or not result.exists():
        tail = " | ".join(log.read_text(errors="replace").strip().splitlines()[-2:])
        row.missing = f"{peer.script} exited {code}: {tail}"
        return row, {}
    data = json.loads(result.read_text())
    row.name = data.get("version") or peer.system
    metrics = {k: v["median"] for k, v in data["metrics"].items()}
    for column, metric in peer.metrics.items():
        row.values[column] = metrics.get(metric)
        if metric not in metrics:
            row.notes.append(f"metric {metric!r} not in {result.name}")
    row.notes.extend(peer.notes)
    return row, metrics


@dataclass
class PeerResults:
    rows: list[Row] = field(default_factory=list)
    #: system -> every metric its script wrote (median of its runs)
    metrics: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: footnotes: the extra figures of PEER_EXTRAS that were measured
    extras: list[str] = field(default_factory=list)

    def metric(self, system: str, name: str) -> float | None:
        value = self.metrics.get(system, {}).get(name)
        return None if value is None else float(value)


def prepare_peers(peers: Sequence[Peer], setup: bool) -> dict[str, str]:
    """Make the peers' venvs (``setup.sh``) before anything is measured, so that the
    peers run right after our figures; the peers that cannot run -> why."""
    if not peers:
        return {}
    if not PEER_SCRIPTS.is_dir():
        return {p.system: f"peer scripts not found at {PEER_SCRIPTS}" for p in peers}
    return ensure_venvs(peers, setup=setup)


def run_peers(peers: Sequence[Peer], n: int, nb: int, reasons: dict[str, str]) -> PeerResults:
    """Every peer in turn, right after our table's figures (at once they would compete
    for the machine; minutes later the machine is another one), pgqueuer's first: its
    figures are the nearest to ours. The rows stay in ``peers``' order."""
    results = PeerResults()
    if not peers:
        return results
    from django.db import connections

    connections.close_all()
    rows: dict[str, Row] = {}
    for peer in sorted(peers, key=lambda p: p.system != "pgqueuer"):
        if peer.system in reasons:
            rows[peer.system] = Row(peer.system, system=peer.system, missing=reasons[peer.system])
            continue
        row, metrics = run_peer(peer, n, nb)
        rows[peer.system] = row
        results.metrics[peer.system] = metrics
        for system, metric, label in PEER_EXTRAS:
            if system == peer.system and metric in metrics:
                results.extras.append(f"{row.name}: {label} = {metrics[metric]:,.1f}")
    results.rows.extend(rows[peer.system] for peer in peers)
    return results
