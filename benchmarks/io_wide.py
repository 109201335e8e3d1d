#!/usr/bin/env python
"""The I/O workload with a thousand runs in flight, ours beside procrastinate's, one window.

    .venv/py312-dj61/bin/python benchmarks/io_wide.py [--rounds 3] [--no-peer]
    IO_N=20000 IO_CONC=1000 IO_MS=100 .venv/py312-dj61/bin/python benchmarks/io_wide.py

``IO_N`` (default 10000) runs of ``bench.io``, each awaiting ``IO_MS`` (100) ms in one
step, ``IO_CONC`` (1000) in flight: the ceiling is ``IO_CONC / IO_MS`` runs a second
(10,000). Each round: one worker process (``runjobs --async-concurrency IO_CONC``), then
two (``runjobs --concurrency 2 --async-concurrency IO_CONC/2``: the same runs in flight
over both cores), each with the worker's CPU per run (user + system of the processes,
start-up included); then procrastinate's I/O workload with one worker at
``--concurrency IO_CONC`` (``shared/bench/bench_procrastinate.py`` with ``RUNS=0``, in
its virtualenv, made by ``shared/bench/setup.sh pr``). Rates are runs / (first start
→ last finish), read from each system's own tables. Prints each round and the medians;
the database is ``BENCH_DB`` (recreated).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "benchmarks.settings")

from benchmarks.db import recreate_db, truncate  # noqa: E402 - needs the path above
from benchmarks.harness import WORK, process, say  # noqa: E402
from benchmarks.peers import PEER_DIR, PEER_OUT, PEER_SCRIPTS, run_script  # noqa: E402

IO_N = int(os.environ.get("IO_N", "10000"))
IO_CONC = int(os.environ.get("IO_CONC", "1000"))
IO_MS = int(os.environ.get("IO_MS", "100"))


def ours(processes: int) -> tuple[float, float]:
    """Runs/s and the workers' CPU microseconds per run, ``processes`` worker processes
    sharing ``IO_CONC`` runs in flight."""
    from benchmarks.jobs import bench_io

    truncate()
    bench_io.enqueue_many([{"ms": IO_MS}] * IO_N)
    args = ["--async-concurrency", str(IO_CONC // processes)]
    if processes > 1:
        args = ["--concurrency", str(processes), *args]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    result = process(args, IO_N, f"io_wide_{processes}")
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if result.problems:
        raise RuntimeError(f"{processes} worker(s): {result.problems[:3]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    truncate()
    return result.rate, cpu / IO_N * 1e6


def procrastinate() -> float | None:
    """procrastinate's I/O workload at the same concurrency, or None without its venv."""
    python = PEER_DIR / "pr" / "bin" / "python"
    if not python.exists():
        say(f"no {python}: run {PEER_SCRIPTS}/setup.sh pr (procrastinate left out)")
        return None
    from django.db import connections

    connections.close_all()
    result = PEER_OUT / "procrastinate.json"
    result.unlink(missing_ok=True)
    env = {
        **os.environ,
        "RUNS": "0",
        "IO_N": str(IO_N),
        "IO_CONC": str(IO_CONC),
        "IO_MS": str(IO_MS),
        "PEERBENCH_DIR": str(PEER_DIR),
        "PEERBENCH_OUT": str(PEER_OUT),
    }
    env.pop("DJANGO_SETTINGS_MODULE", None)
    env.pop("PYTHONPATH", None)
    log = WORK / "peer_procrastinate_io_wide.log"
    code = run_script(python, "bench_procrastinate.py", env, log, timeout=1800)
    if code != 0 or not result.exists():
        raise RuntimeError(f"procrastinate exited {code}; see {log}")
    metrics = json.loads(result.read_text())["metrics"]
    name = f"IO {IO_MS}ms awaits, 1 worker conc={IO_CONC} jobs/s"
    return float(metrics[name]["median"])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--no-peer", action="store_true", help="ours only")
    args = parser.parse_args()

    import django

    django.setup()
    from django.core.management import call_command

    WORK.mkdir(parents=True, exist_ok=True)
    recreate_db()
    call_command("migrate", verbosity=0)
    rates: dict[str, list[float]] = {}
    cpu: dict[str, list[float]] = {}
    for round_ in range(args.rounds):
        figures: dict[str, float] = {}
        for processes in (1, 2):
            name = f"ours, {processes} process{'es' if processes > 1 else ''}"
            figures[name], per_run = ours(processes)
            cpu.setdefault(name, []).append(per_run)
        if not args.no_peer and (peer := procrastinate()) is not None:
            figures["procrastinate, 1 process"] = peer
        for name, rate in figures.items():
            rates.setdefault(name, []).append(rate)
        say(f"round {round_ + 1}: " + ", ".join(f"{k} {v:,.0f}/s" for k, v in figures.items()))
    ceiling = IO_CONC * 1000 / IO_MS
    print(
        f"I/O workload: {IO_N} runs, {IO_CONC} in flight, {IO_MS} ms each (ceiling "
        f"{ceiling:,.0f} runs/s), median of {args.rounds} (load {os.getloadavg()[0]:.1f})"
    )
    for name, values in rates.items():
        runs = ", ".join(f"{v:,.0f}" for v in values)
        used = f"   CPU {statistics.median(cpu[name]):,.0f} us/run" if name in cpu else ""
        print(f"  {name:26} {statistics.median(values):>7,.0f} runs/s   ({runs}){used}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
