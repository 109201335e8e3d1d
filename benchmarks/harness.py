"""What every benchmark script shares: where its logs go, its progress lines, and the
``runjobs`` processes that do the work (started, stopped, timed from the database).

Real worker processes, not in-process loops: a figure must include what a deployment
pays (process start, its own connection, its logging). Django is imported inside the
functions, so the scripts can set ``DJANGO_SETTINGS_MODULE`` before it is configured.
"""

from __future__ import annotations

import os
import re
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
#: Worker logs, peer logs and the probes' scratch files (kept after the run).
WORK = Path(os.environ.get("BENCH_WORK_DIR", str(REPO / ".tmp" / "bench")))

Worker = subprocess.Popen[bytes]


def say(message: str) -> None:
    """Progress goes to stderr, so stdout holds only the report."""
    print(f"[bench {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def pct(values: Sequence[float], q: int) -> float:
    """The ``q``-th percentile (inclusive method: p100 is the max)."""
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1]


def worker_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """This checkout first on the path, and the benchmark's settings."""
    path = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p)
    return {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "benchmarks.settings",
        "PYTHONPATH": path,
        **(extra or {}),
    }


def start_worker(args: Sequence[str], log: Path, env: dict[str, str] | None = None) -> Worker:
    """``runjobs *args`` in its own session, everything it prints into ``log``."""
    cmd = [sys.executable, "-m", "django", "runjobs", *args]
    with open(log, "w") as out:
        return subprocess.Popen(
            cmd,
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=REPO,
            env=worker_env(env),
            start_new_session=True,
        )


def stop_worker(proc: Worker, timeout: float = 20) -> None:
    """SIGTERM (the worker drains), then SIGKILL after ``timeout`` seconds."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def start_idle_worker(
    log: Path, what: str, env: dict[str, str] | None = None, args: Sequence[str] = ()
) -> Worker:
    """A worker (not ``--burst``) that has made its first, empty claim and is waiting:
    the state whose reaction time the latency probes measure."""
    proc = start_worker(list(args), log, env)
    deadline = time.time() + 30
    while "wake=" not in log.read_text(errors="replace"):
        if proc.poll() is not None or time.time() > deadline:
            stop_worker(proc)
            raise RuntimeError(f"{what} worker did not start; see {log}")
        time.sleep(0.05)
    time.sleep(1.5)  # its first (empty) claim, then it LISTENs
    return proc


def wake_mode(log: Path) -> str:
    """How the worker said it is woken (``wake=listen`` on PostgreSQL, else polling)."""
    mode = re.search(r"wake=(\S+)", log.read_text(errors="replace"))
    return mode.group(1) if mode else "?"


def log_problems(log: Path) -> list[str]:
    """WARNING/ERROR lines and tracebacks a worker printed (it logs INFO per run)."""
    lines = log.read_text(errors="replace").splitlines()
    return [ln for ln in lines if " WARNING " in ln or " ERROR " in ln or "Traceback" in ln]


@dataclass
class Processed:
    rate: float
    seconds: float
    problems: list[str]


def process(
    args: Sequence[str], expected: int, label: str, env: dict[str, str] | None = None
) -> Processed:
    """Run ``runjobs --burst`` with ``args`` until it exits; jobs/s from the DB timestamps
    (first start to last finish: the worker's start-up is not counted, as for the peers)."""
    from django.db.models import Count, Max, Min, Q

    from django_durable_jobs.models import JobRun

    log = WORK / f"worker_{label}.log"
    proc = start_worker(["--burst", *args], log, env)
    try:
        code = proc.wait(timeout=max(300.0, expected / 5))
    except subprocess.TimeoutExpired:
        stop_worker(proc)
        raise RuntimeError(f"{label}: worker did not finish in time; see {log}") from None
    if code != 0:
        raise RuntimeError(f"{label}: runjobs exited {code}; see {log}")
    agg = JobRun.objects.aggregate(
        first=Min("started_at"),
        last=Max("finished_at"),
        ok=Count("id", filter=Q(status="succeeded")),
        total=Count("id"),
    )
    if agg["ok"] != expected or agg["total"] != expected:
        raise RuntimeError(
            f"{label}: {agg['ok']} of {agg['total']} runs succeeded, expected {expected}; see {log}"
        )
    seconds = (agg["last"] - agg["first"]).total_seconds()
    return Processed(expected / seconds, seconds, log_problems(log))
