"""The benchmark's shape and its report, without running it (``make bench`` does).

Its package internals are imported in one module, so a move inside the package is a
one-spot fix there; its modules stay small; and the goals block of the report gives
each goal its verdict from the figures, n/a when the peer it compares with was not run.
"""

import ast
from pathlib import Path

from benchmarks.io_bench import IoResult, RssResult
from benchmarks.report import Report, Row, goals, render
from benchmarks.wakeup import Wakeup

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
#: What any benchmark module may import from the package: its public paths.
PUBLIC = {"django_durable_jobs", "django_durable_jobs.models"}


def imported_modules(path: Path) -> set[str]:
    modules: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            modules.add(node.module)
        elif isinstance(node, ast.Import):
            modules.update(alias.name for alias in node.names)
    return modules


def test_only_internals_py_imports_the_package_internals() -> None:
    reaching_in = {
        path.name: sorted(
            m
            for m in imported_modules(path)
            if m.split(".")[0] == "django_durable_jobs" and m not in PUBLIC
        )
        for path in BENCHMARKS.glob("*.py")
        if path.name != "internals.py"
    }
    assert {name: found for name, found in reaching_in.items() if found} == {}
    assert imported_modules(BENCHMARKS / "internals.py") - PUBLIC - {"__future__"}


def test_benchmark_modules_stay_small() -> None:
    sizes = {p.name: len(p.read_text().splitlines()) for p in BENCHMARKS.glob("*.py")}
    assert {name: lines for name, lines in sizes.items() if lines > 400} == {}


def report(peers: list[Row], procrastinate_io: float | None) -> Report:
    ours = Row(
        "django-durable-jobs (this repo)",
        {"enqueue": 900.0, "w1": 5000.0, "w2": 6000.0, "latency": 2.5, "steps": 1600.0},
    )
    return Report(
        header=["header"],
        ours=ours,
        plain=Row("django-durable-jobs, plain project", {"w1": 155.0}),
        peers=peers,
        extras=[],
        io=IoResult(rate=900.0, seconds=2.2, connections=5),
        io_default=IoResult(rate=600.0, seconds=3.3, connections=5),
        procrastinate_io=procrastinate_io,
        rss=[
            RssResult("bench.noop", 2000, {1000: 60_000, 2000: 61_000}),
            RssResult("bench.anoop", 2000, {1000: 60_000, 2000: 70_000}),
        ],
        wakeup=Wakeup(3, "listen", [3.0, 4.0, 30.0], [1.0, 2.0, 3.0], [0.1, 0.1, 0.1], []),
        floor_ms=1.8,
        mariadb="skipped (--no-mariadb)",
        plans=["plan"],
        round_trips=["round trips"],
        problems=[],
    )


def test_each_goal_gets_its_ratio_and_verdict_against_the_peers_run() -> None:
    peers = [
        Row("pgqueuer 0.19", {"w1": 4815.0, "latency": 5.5}, system="pgqueuer"),
        Row("absurd 0.1", {"w1": 186.0, "steps": 754.0}, system="absurd"),
    ]
    lines = goals(report(peers, procrastinate_io=419.0))
    no_op, io, steps, rss, start, wake = lines[1:]
    assert "tuned 5,000/s = 1.04x" in no_op and "tuned met, plain NOT met" in no_op
    assert "= 2.15x of 419/s -> met" in io and "at most 5 connections" in io
    assert "= 2.12x of 754 -> met" in steps
    assert "bench.noop +1.7%, bench.anoop +16.7% -> NOT met" in rss
    assert "2.5 ms (pgqueuer 5.5 ms; this machine's floor, raw psycopg: 1.8 ms) -> met" in start
    assert "4.0 / 29.5 ms -> NOT met" in wake


def test_a_goal_against_a_peer_not_run_is_na_and_the_table_has_both_our_rows() -> None:
    missing = Row("pgqueuer", system="pgqueuer", missing="venv missing")
    out = render(report([missing], procrastinate_io=None))
    assert any(line.startswith("django-durable-jobs, plain project |") for line in out)
    assert any(line.startswith("pgqueuer ") and line.endswith("n/a") for line in out)
    no_op = next(line for line in out if "no-op 1 worker >= pgqueuer" in line)
    assert no_op.endswith("tuned n/a, plain n/a")
    assert next(line for line in out if "I/O workload >= 2x" in line).endswith("-> n/a")
    assert next(line for line in out if "10-step >= 2x Absurd" in line).endswith("-> n/a")
    start = next(line for line in out if "enqueue -> start p50" in line)
    assert start.endswith("2.5 ms (this machine's floor, raw psycopg: 1.8 ms) -> met")


def test_the_dashboard_benchmarks_table_says_how_many_passes_a_default_run_makes() -> None:
    source = (BENCHMARKS / "dashboard.py").read_text()
    tree = ast.parse(source)
    (repeat,) = [
        node.value.value
        for node in tree.body
        if isinstance(node, ast.Assign)
        and [getattr(t, "id", None) for t in node.targets] == ["REPEAT"]
        and isinstance(node.value, ast.Constant)
        and isinstance(node.value.value, int)
    ]
    assert 'add_argument("--repeat", type=int, default=REPEAT)' in source
    readme = (BENCHMARKS / "README.md").read_text()
    section = readme.split("## The dashboard's queries")[1].split("\n## ")[0]
    assert f"median / worst of {repeat}, ms" in section
    assert f"[--repeat {repeat}]" in section
    assert "--repeat" in source.split('"""')[1] and f"[--repeat {repeat}]" in source
