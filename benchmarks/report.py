"""The report: one table of our figures beside the peers', the notes on how each was
taken, the ratios ours / peer, then the sections of the other probes.

Pure formatting: every figure arrives measured (see ``Report``); nothing here touches a
database, except ``environment`` reading the server's version for the header.
"""

from __future__ import annotations

import os
import platform
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from benchmarks.harness import REPO, WORK, pct
from benchmarks.io_bench import IoResult, RssResult, io_report
from benchmarks.wakeup import Wakeup, wakeup_report

#: The table's columns: key (in ``Row.values``) -> title.
COLUMNS = (
    ("enqueue", "enqueue 1-by-1 /s"),
    ("bulk", "bulk enqueue /s"),
    ("w1", "1 worker jobs/s"),
    ("w2", "2 workers jobs/s"),
    ("latency", "start latency ms"),
    ("steps", "10-step steps/s"),
)


@dataclass
class Row:
    name: str
    values: dict[str, float | None] = field(default_factory=dict)
    #: Why the whole row has no figures (a peer that could not be run).
    missing: str | None = None
    notes: list[str] = field(default_factory=list)
    #: A peer's name in shared/bench (``name`` is the version its script reports).
    system: str | None = None


@dataclass
class Report:
    """Everything one invocation measured, in the order it is printed."""

    header: list[str]
    ours: Row
    plain: Row  # ours, 1 worker, under a plain project's settings
    peers: list[Row]
    extras: list[str]  # the peers' extra figures, as footnotes
    io: IoResult
    io_default: IoResult
    procrastinate_io: float | None
    rss: list[RssResult]
    wakeup: Wakeup
    floor_ms: float  # enqueue -> start with raw psycopg (benchmarks/floor.py)
    mariadb: dict[str, Any] | str  # its figures, or why there are none
    plans: list[str]
    round_trips: list[str]
    problems: list[str]


def fmt(value: float | None, column: str) -> str:
    if value is None:
        return "—"
    if column == "latency":
        return f"{value:,.1f}"
    return f"{value:,.0f}"


def table(rows: Sequence[Row]) -> list[str]:
    header = ["system", *(title for _, title in COLUMNS)]
    body = []
    for row in rows:
        if row.missing is not None:
            body.append([row.name, *(["n/a"] * len(COLUMNS))])
        else:
            body.append([row.name, *(fmt(row.values.get(key), key) for key, _ in COLUMNS)])
    widths = [max(len(r[i]) for r in [header, *body]) for i in range(len(header))]

    def render(cells: Sequence[str]) -> str:
        first = cells[0].ljust(widths[0])
        rest = (c.rjust(w) for c, w in zip(cells[1:], widths[1:], strict=True))
        return " | ".join([first, *rest])

    rule = "-+-".join("-" * w for w in widths)
    return [render(header), rule, *(render(r) for r in body)]


def notes(rows: Sequence[Row], extras: Sequence[str]) -> list[str]:
    out = ["Notes:"]
    for row in rows:
        if row.missing is not None:
            out.append(f"  {row.name}: n/a — {row.missing}")
        out.extend(f"  {row.name}: {note}" for note in row.notes)
    out.extend(f"  {extra}" for extra in extras)
    out.append(
        "  '—' = not measured for that system (no durable steps in procrastinate, django-tasks-db)."
    )
    return out


def ratios(ours: Row, peers: Sequence[Row]) -> list[str]:
    out = []
    for peer in peers:
        if peer.missing is not None:
            out.append(f"  ours / {peer.name}: n/a ({peer.missing})")
            continue
        parts = []
        for key, title in COLUMNS:
            a, b = ours.values.get(key), peer.values.get(key)
            if a and b:
                parts.append(f"{title} {a / b:.2f}x")
        w1a, w1b = ours.values.get("w1"), peer.values.get("w1")
        head = f"no-op 1 worker {w1a / w1b:.2f}x" if w1a and w1b else "no-op 1 worker n/a"
        out.append(f"  ours / {peer.name}: {head}   (all: {'; '.join(parts)})")
    return out


def peer_value(peers: Sequence[Row], system: str, key: str) -> float | None:
    """A peer's figure for one of the table's columns; None if it was not run."""
    row = next((p for p in peers if p.system == system and p.missing is None), None)
    return None if row is None else row.values.get(key)


def verdict(met: bool | None) -> str:
    return "n/a" if met is None else "met" if met else "NOT met"


def times(ours: float | None, theirs: float | None) -> str:
    return f"{ours / theirs:.2f}x" if ours and theirs else "n/a"


def goals(r: Report) -> list[str]:
    """The ratios the async-and-throughput issue (14) set as goals, each with its
    verdict in this run; a goal against a peer that was not run is n/a."""
    tuned, plain = r.ours.values.get("w1") or 0.0, r.plain.values.get("w1") or 0.0
    pgq = peer_value(r.peers, "pgqueuer", "w1")
    steps, absurd = r.ours.values.get("steps") or 0.0, peer_value(r.peers, "absurd", "steps")
    io, procrastinate = r.io.rate, r.procrastinate_io
    latency = r.ours.values.get("latency") or 0.0
    pgq_latency = peer_value(r.peers, "pgqueuer", "latency")
    wake50, wake99 = pct(r.wakeup.latency_ms, 50), pct(r.wakeup.latency_ms, 99)
    worst = max(r.rss, key=lambda x: x.growth)
    return [
        "Goals, in this run:",
        f"  no-op 1 worker >= pgqueuer: tuned {tuned:,.0f}/s = {times(tuned, pgq)}, plain "
        f"project {plain:,.0f}/s = {times(plain, pgq)} of "
        + ("pgqueuer (not run)" if pgq is None else f"pgqueuer's {pgq:,.0f}/s")
        + f" -> tuned {verdict(None if pgq is None else tuned >= pgq)}, "
        f"plain {verdict(None if pgq is None else plain >= pgq)}",
        f"  I/O workload >= 2x procrastinate: {io:,.0f} runs/s (at most {r.io.connections} "
        f"connections) = {times(io, procrastinate)} of "
        + ("procrastinate (not run)" if procrastinate is None else f"{procrastinate:,.0f}/s")
        + f" -> {verdict(None if procrastinate is None else io >= 2 * procrastinate)}",
        f"  10-step >= 2x Absurd: {steps:,.0f} steps/s = {times(steps, absurd)} of "
        + ("Absurd (not run)" if absurd is None else f"{absurd:,.0f}")
        + f" -> {verdict(None if absurd is None else steps >= 2 * absurd)}",
        f"  worker RSS after {max(worst.rss_kb):,} runs within 10% of after "
        f"{min(worst.rss_kb):,}: "
        + ", ".join(f"{x.job} {x.growth:+.1%}" for x in r.rss)
        + f" -> {verdict(worst.growth <= 0.10)}",
        f"  enqueue -> start p50 <= 3 ms: {latency:.1f} ms"
        + ("" if pgq_latency is None else f" (pgqueuer {pgq_latency:.1f} ms")
        + ("; " if pgq_latency is not None else " (")
        + f"this machine's floor, raw psycopg: {r.floor_ms:.1f} ms)"
        + f" -> {verdict(latency <= 3)}",
        f"  event commit -> next step p50 <= 5 ms, p99 <= 20 ms: {wake50:.1f} / "
        f"{wake99:.1f} ms -> {verdict(wake50 <= 5 and wake99 <= 20)}",
    ]


def per_database(ours: Row, wakeup: Wakeup, mariadb: dict[str, Any] | str) -> list[str]:
    """Our figures on PostgreSQL beside MariaDB's."""
    if isinstance(mariadb, str):
        return [f"Ours per database: MariaDB n/a — {mariadb}"]
    rows = [
        ("1 worker jobs/s", ours.values.get("w1"), mariadb["w1"], ",.0f"),
        ("2 workers jobs/s", ours.values.get("w2"), mariadb["w2"], ",.0f"),
        ("10-step steps/s", ours.values.get("steps"), mariadb["steps"], ",.0f"),
        ("event wake p50 ms", pct(wakeup.latency_ms, 50), mariadb["wake_p50"], ",.1f"),
        ("event wake p99 ms", pct(wakeup.latency_ms, 99), mariadb["wake_p99"], ",.1f"),
    ]
    out = [
        f"Ours per database (PostgreSQL: wake={wakeup.mode}; MariaDB "
        f"{mariadb['server'].split('-')[0]}: wake={mariadb['wake_mode']}):",
        f"  {'':18s} | {'PostgreSQL':>10s} | {'MariaDB':>10s}",
        f"  {'-' * 18}-+-{'-' * 10}-+-{'-' * 10}",
    ]
    for title, pg, maria, spec in rows:
        pg_text = "—" if pg is None else format(pg, spec)
        out.append(f"  {title:18s} | {pg_text:>10s} | {format(maria, spec):>10s}")
    out += ["", "MariaDB:", *mariadb["wake_report"], *mariadb["explain"]]
    return out


def environment(n: int, nb: int, lat_jobs: int, wake_events: int) -> list[str]:
    """The header: which code, on which machine and servers, with which sizes."""
    from importlib.metadata import version as dist_version

    import django

    from benchmarks.db import scalar

    version = scalar("SHOW server_version")
    try:
        ours = dist_version("django-durable-jobs")
    except Exception:
        ours = "?"
    git = subprocess.run(
        ["git", "-C", str(REPO), "log", "-1", "--format=%h %s"], capture_output=True, text=True
    ).stdout.strip()
    dirty = subprocess.run(
        ["git", "-C", str(REPO), "status", "--porcelain", "--", "django_durable_jobs"],
        capture_output=True,
        text=True,
    ).stdout.strip()
    return [
        f"code: {git or '?'}" + (" + uncommitted changes in django_durable_jobs/" if dirty else ""),
        f"django-durable-jobs {ours} benchmark, {time.strftime('%Y-%m-%d %H:%M')} on "
        f"{platform.node()}: {os.cpu_count()} CPUs, PostgreSQL {version}, "
        f"Python {platform.python_version()}, Django {django.get_version()}",
        f"N={n} no-op jobs, NB={nb} ten-step runs, {lat_jobs} latency samples, "
        f"{wake_events} events for the wake-up latency; "
        "one run each (peers with RUNS=1). Numbers are machine-specific: compare ratios.",
    ]


def render(r: Report) -> list[str]:
    """The whole report, a blank line between its sections."""
    rows = [r.ours, r.plain, *r.peers]
    out = ["", *r.header, "", *table(rows), "", *notes(rows, r.extras)]
    out += ["", "Ratios, ours / peer (>1: ours is better; for latency <1 is better):"]
    out += ratios(r.ours, r.peers) if r.peers else ["  (no peers run)"]
    out += ["", *goals(r)]
    out += ["", *io_report(r.io, r.io_default, r.rss)]
    if r.procrastinate_io:
        out.append(
            f"  procrastinate, same workload: {r.procrastinate_io:,.0f} jobs/s; ours / theirs "
            f"{r.io.rate / r.procrastinate_io:.2f}x"
        )
    out += ["", *wakeup_report(r.wakeup)]
    out += ["", *per_database(r.ours, r.wakeup, r.mariadb)]
    out += ["", *r.plans, "", *r.round_trips, ""]
    if r.problems:
        out.append(f"Worker log warnings/errors ({len(r.problems)}; logs in {WORK}):")
        out.extend(f"  {line}" for line in r.problems[:20])
    else:
        out.append(f"Worker logs: no warnings or errors (logs in {WORK}).")
    return out
