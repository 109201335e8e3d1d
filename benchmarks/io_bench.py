"""Async workloads of the benchmark: the I/O workload against procrastinate's, the
connections it uses, and a worker's memory over many runs (RSS sampled).

Called by ``run.py`` (``measure_io``, ``measure_rss``); the report prints ``io_report``.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.db import scalar, truncate
from benchmarks.harness import WORK, process, start_worker, stop_worker

IO_N = int(os.environ.get("IO_N", "2000"))
IO_CONC = int(os.environ.get("IO_CONC", "100"))
IO_MS = int(os.environ.get("IO_MS", "100"))
RSS_RUNS = int(os.environ.get("RSS_RUNS", "20000"))


@dataclass
class IoResult:
    rate: float
    seconds: float
    connections: int
    problems: list[str] = field(default_factory=list)


def _connections_of(dbname: str) -> int:
    return int(
        scalar(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid()",
            [dbname],
        )
    )


def measure_io(label: str = "io", env: dict[str, str] | None = None) -> IoResult:
    """``IO_N`` runs of ``bench.io`` (one step awaiting ``IO_MS``), one worker process
    with ``--async-concurrency IO_CONC``; the most connections it held at once."""
    from django.conf import settings

    from benchmarks.jobs import bench_io

    truncate()
    bench_io.enqueue_many([{"ms": IO_MS}] * IO_N)
    dbname = str(settings.DATABASES["default"]["NAME"])
    peak = [0]
    done = threading.Event()

    def sample() -> None:
        from django.db import connections

        try:
            while not done.wait(0.05):
                peak[0] = max(peak[0], _connections_of(dbname))
        finally:
            connections.close_all()

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        result = process(["--async-concurrency", str(IO_CONC)], IO_N, label, env)
    finally:
        done.set()
        sampler.join()
    truncate()
    return IoResult(result.rate, result.seconds, peak[0], result.problems)


def _rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


@dataclass
class RssResult:
    job: str
    runs: int
    rss_kb: dict[int, int]  # runs finished -> worker RSS then

    @property
    def growth(self) -> float:
        first, last = self.rss_kb[min(self.rss_kb)], self.rss_kb[max(self.rss_kb)]
        return (last - first) / first


def measure_rss(job: Any, label: str, runs: int = RSS_RUNS) -> RssResult:
    """One worker executes ``runs`` runs of ``job``; its RSS is sampled after 1,000 runs
    and then every ``runs/10``."""
    from django_durable_jobs.models import JobRun

    truncate()
    for start in range(0, runs, 5000):
        job.enqueue_many([{}] * min(5000, runs - start))
    proc = start_worker([], WORK / f"worker_rss_{label}.log")
    # From 1,000 on (the goal's baseline: start-up allocations done), in order: a mark
    # below 1,000 would be sampled late, when the 1,000th run finished, under its label.
    first = min(1000, runs)
    marks = sorted(m for m in {first, *range(runs // 10, runs + 1, runs // 10)} if m >= first)
    samples: dict[int, int] = {}
    deadline = time.monotonic() + max(600.0, runs / 20)
    try:
        while marks and time.monotonic() < deadline:
            done = JobRun.objects.filter(status="succeeded").count()
            while marks and done >= marks[0]:
                samples[marks.pop(0)] = _rss_kb(proc.pid)
            time.sleep(0.05)
    finally:
        stop_worker(proc)
    truncate()
    return RssResult(job.name, runs, samples)


def io_report(io: IoResult, io_default: IoResult | None, rss: list[RssResult]) -> list[str]:
    lines = [
        f"I/O workload ({IO_N} runs, each awaiting {IO_MS} ms in one step; 1 worker process, "
        f"--async-concurrency {IO_CONC}):",
        f"  ours: {io.rate:,.0f} runs/s ({io.seconds:.2f} s); at most {io.connections} "
        "database connections held by the worker at once (main, heartbeat, LISTEN, lane)",
    ]
    if io_default is not None:
        lines.append(
            f"  ours with CONN_MAX_AGE=0 (Django's default): {io_default.rate:,.0f} runs/s, "
            f"{io_default.connections} connections at most"
        )
    lines.append("Worker memory (RSS of one runjobs process, sampled as runs finished):")
    for result in rss:
        shown = ", ".join(f"{n:,}: {kb / 1024:.1f} MB" for n, kb in sorted(result.rss_kb.items()))
        lines.append(f"  {result.job}: {shown}; growth first→last {result.growth:+.1%}")
    return lines
