#!/usr/bin/env python
"""Our figures with millions of runs in the tables, on PostgreSQL.

    .venv/py312-dj61/bin/python benchmarks/scale.py [--sizes 0,1000000,10000000] [--json]

For each size: a database of its own (``bench_scale_<size>``; dropped and made anew
unless ``--reuse`` finds it filled), filled in SQL (benchmarks/scale_fill.py) with
``size`` finished runs of five step records each, beside ``--parked`` sleeping and
waiting runs and a ``--backlog`` of queued runs on a queue of its own; then, with real
``runjobs`` processes where a worker is measured (benchmarks/scale_probes.py): the
claim's latency, no-op runs/s with 1 and 4 worker processes, 10-step steps/s, enqueue
rates, the event wake-up, the first dashboard page's fold of the day into its rollup,
the dashboard's queries and ``jobs stats --json``, table and index sizes, ``--pass``
no-op runs through 4 workers and the dead tuples they leave, and last the purge of
the oldest ``--purge`` finished runs with the claim's latency during it. ``--json``
prints one object per size, one a line. benchmarks/README.md has the figures and what
each means.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))
os.environ["DJANGO_SETTINGS_MODULE"] = "benchmarks.settings"


def parse(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    sizes = parser.add_argument
    sizes("--sizes", default="0,1000000,10000000", help="finished runs, comma-separated")
    sizes("--parked", type=int, default=1_000_000, help="sleeping + waiting runs at each size")
    sizes("--backlog", type=int, default=100_000, help="queued runs on the queue 'backlog'")
    sizes("--noop", type=int, default=5_000, help="no-op runs per throughput figure")
    sizes("--steps-runs", type=int, default=300, help="10-step runs for steps/s")
    sizes("--enqueue", type=int, default=2_000, help="runs per enqueue figure")
    sizes("--claims", type=int, default=2_000, help="claims timed for the claim's latency")
    sizes("--events", type=int, default=100, help="events for the wake-up latency")
    sizes("--pass", dest="pass_runs", type=int, default=1_000_000, help="runs through 4 workers")
    sizes("--purge", type=int, default=1_000_000, help="oldest finished runs purged, last")
    sizes("--reuse", action="store_true", help="keep a database already filled at a size")
    sizes("--json", action="store_true", help="one JSON object per size, one a line")
    return parser.parse_args(argv)


def use_database(size: int, reuse: bool) -> bool:
    """Point Django at this size's database; True when it is already filled."""
    from django.conf import settings
    from django.db import connections

    from benchmarks.db import recreate_db, scalar

    connections.close_all()
    name = f"bench_scale_{size}"
    settings.DATABASES["default"]["NAME"] = name
    os.environ["BENCH_DB"] = name  # the workers' settings
    if reuse:
        try:
            return bool(scalar("SELECT filled FROM bench_scale_filled"))
        except Exception:  # no such database or table: fill it
            connections.close_all()
    recreate_db()
    return False


def measure(size: int, args: argparse.Namespace) -> dict[str, Any]:
    from django.core.management import call_command

    from benchmarks import scale_probes as probe
    from benchmarks.db import run_sql
    from benchmarks.harness import say
    from benchmarks.scale_fill import fill
    from benchmarks.wakeup import measure_wakeup

    started = time.perf_counter()
    filled = use_database(size, args.reuse)
    call_command("migrate", verbosity=0)  # a reused database gets the newer migrations
    if not filled:
        fill(size, args.parked, args.backlog)
        run_sql("CREATE TABLE bench_scale_filled AS SELECT true AS filled")
    out: dict[str, Any] = {"size": size, "parked": args.parked, "backlog": args.backlog}
    out["fill_s"] = round(time.perf_counter() - started)
    say(f"scale {size:,}: claims")
    out["claim_p50_ms"], out["claim_p99_ms"] = probe.percentiles(probe.claims(args.claims))
    say(f"scale {size:,}: no-op runs, 1 and 4 workers")
    out["noop_per_s"] = round(probe.no_op(args.noop, 1))
    out["noop_4_per_s"] = round(probe.no_op(args.noop, 4))
    say(f"scale {size:,}: 10-step runs")
    out["steps_per_s"] = round(probe.ten_steps(args.steps_runs))
    say(f"scale {size:,}: enqueue")
    one, bulk = probe.enqueue_rates(args.enqueue)
    out["enqueue_per_s"], out["enqueue_bulk_per_s"] = round(one), round(bulk)
    wake = measure_wakeup(args.events, empty=False, worker_args=["--queue", "default"])
    out["wake_p50_ms"], out["wake_p99_ms"] = probe.percentiles(wake.latency_ms)
    out["dashboard_fold_ms"] = round(probe.fold_ms(), 1)
    out["dashboard_ms"], out["stats_ms"] = (round(ms, 1) for ms in probe.page_ms())
    out["tables"] = probe.table_sizes()
    if args.pass_runs:
        out.update(run_through(args.pass_runs))
    say(f"scale {size:,}: the claim without a purge, then during one")
    _, quiet = probe.during(lambda: time.sleep(10), probe.PURGE_BACKLOG)
    out["claim_p99_without_purge_ms"] = probe.percentiles(quiet)[1]
    before = probe.finished_runs()
    seconds, busy = probe.during(probe.purge_oldest(args.purge), probe.PURGE_BACKLOG)
    out["purged"] = before - probe.finished_runs()
    out["purge_s"] = round(seconds, 1)
    out["claim_p99_during_purge_ms"] = probe.percentiles(busy)[1]
    return out


def run_through(n: int) -> dict[str, Any]:
    """``n`` no-op runs enqueued and executed by 4 worker processes; the tables'
    growth and dead tuples after them (autovacuum as configured)."""
    from benchmarks import scale_probes as probe
    from benchmarks.harness import say
    from benchmarks.jobs import bench_noop

    say(f"scale: {n:,} runs pass through 4 workers")
    before = probe.table_sizes()["jobrun"]
    for first in range(0, n, 10_000):
        bench_noop.using(queue="scale-pass").enqueue_many([()] * min(10_000, n - first))
    rate = probe.burst("scale-pass", n, 0, ["--concurrency", "4"], "pass")
    after = probe.table_sizes()["jobrun"]
    return {
        "pass_runs": n,
        "pass_per_s": round(rate),
        "pass_table_mb": [before["table_mb"], after["table_mb"]],
        "pass_dead_tuples": after["dead"],
    }


def text(figures: dict[str, Any]) -> list[str]:
    lines = [
        f"size {figures['size']:,} finished runs (+ {figures['parked']:,} parked, "
        f"{figures['backlog']:,} backlog), filled in {figures['fill_s']}s"
    ]
    for key, value in figures.items():
        if key == "tables":
            for table, sizes in value.items():
                lines.append(f"  table {table:<18} {sizes}")
        elif key not in ("size", "parked", "backlog", "fill_s"):
            lines.append(f"  {key:<28} {value}")
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    args = parse(argv)
    sizes = [int(s.replace("_", "")) for s in args.sizes.split(",") if s.strip()]

    import django

    django.setup()
    from benchmarks.harness import WORK

    WORK.mkdir(parents=True, exist_ok=True)
    for size in sizes:
        figures = measure(size, args)
        print(json.dumps(figures) if args.json else "\n".join(text(figures)), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
