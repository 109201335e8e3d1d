"""The package's layers and the arrows between them (docs/explanation/architecture.md).

Every module of ``django_durable_jobs`` is read with ``ast``: imports at module level,
inside functions and under ``TYPE_CHECKING`` all count, because an import moved into a
function still points the same way (and hiding a cycle there is still a cycle). No
database, no Django setup: the modules are parsed, not imported.

The rules, read as documentation:

    engine/      the pure heart. Imports nothing of Django and nothing of the package
                 outside engine/ but ``exceptions``.
    models       imports Django and db/fields, db/schema only (the column types), and
                 engine/vocabulary (StepStatus: one enum for the engine and the column).
    db/          the seam to the database. Never imports the worker, the verbs, the
                 admin, the management commands, observe/ or contrib/.
    verbs/       enqueue, runs, events, children, failure_handlers, schedules, retention,
                 invocations: what a run or an event can be made to do, shared by the
                 worker, the admin and the CLI. Never imports them, nor observe/.
    observe/     reads for operators. Never imports the worker, the admin or commands.
    worker/      never imports the admin, the commands or observe/.
    definitions/ ``@job``'s registry and the lookup, autodiscovery and where it looked:
                 only engine/, exceptions, conf (and models for a type annotation).
    everywhere   no cycle between modules.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path

import pytest

PACKAGE = "django_durable_jobs"
ROOT = Path(__file__).resolve().parents[2] / PACKAGE

#: Folders that are a layer of their own.
FOLDERS = frozenset(
    {
        "engine",
        "definitions",
        "verbs",
        "models",
        "db",
        "worker",
        "observe",
        "admin",
        "management",
        "contrib",
    }
)

#: layer -> the layers it must not import.
MUST_NOT_IMPORT: Mapping[str, frozenset[str]] = {
    "db": frozenset({"worker", "verbs", "admin", "management", "observe", "contrib"}),
    "verbs": frozenset({"worker", "admin", "management", "observe", "contrib"}),
    "observe": frozenset({"worker", "admin", "management", "contrib"}),
    "worker": frozenset({"admin", "management", "observe"}),
}
#: layer -> the only modules of the package it may import (a prefix covers a folder).
ONLY_IMPORTS: Mapping[str, tuple[str, ...]] = {
    "engine": ("engine", "exceptions"),
    # engine.vocabulary: StepStatus is one enum for the engine and the column.
    "models": ("db.fields", "db.schema", "engine.vocabulary"),
    "definitions": ("engine", "exceptions", "conf", "models"),
}
#: layers that may not import Django at all.
NO_DJANGO = frozenset({"engine"})


def layer(module: str) -> str:
    """The layer of ``module`` (a name relative to the package: ``db.store``)."""
    head = module.split(".")[0]
    return head  # a folder is a layer; a top-level module is its own: conf, checks, ...


def modules(root: Path = ROOT) -> dict[str, Path]:
    """Every module of the package by its relative name (``""`` is the package)."""
    found = {}
    for path in sorted(root.rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


def imports(module: str, source: str, known: Iterable[str]) -> Iterator[str]:
    """What ``module`` imports: package modules by relative name, others by their
    absolute name (``django.db``). ``from .x import y`` names ``x.y`` when that is a
    module, else ``x``."""
    names = set(known)
    is_package = module == "" or _is_package(module, names)
    here = module.split(".") if module else []
    package = here if is_package else here[:-1]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield _relative(alias.name)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - (node.level - 1)]
                target = ".".join([*base, *([node.module] if node.module else [])])
                target = f"{PACKAGE}.{target}" if target else PACKAGE
            else:
                target = node.module or ""
            target = _relative(target)
            for alias in node.names:
                sub = f"{target}.{alias.name}" if target else alias.name
                yield sub if sub in names else target


def _is_package(module: str, names: set[str]) -> bool:
    return any(other.startswith(module + ".") for other in names)


def _relative(name: str) -> str:
    if name == PACKAGE:
        return ""
    if name.startswith(PACKAGE + "."):
        return name[len(PACKAGE) + 1 :]
    return f"<{name}>"  # outside the package: <django.db>, <asyncio>


def graph(sources: Mapping[str, str]) -> dict[str, set[str]]:
    """module -> the package modules and outside names it imports."""
    return {
        module: set(imports(module, source, sources)) - {module}
        for module, source in sources.items()
    }


def violations(edges: Mapping[str, set[str]]) -> list[str]:
    """Every arrow that breaks a rule of the table above, as readable lines."""
    found = []
    for module, targets in sorted(edges.items()):
        if module.startswith("migrations"):
            continue  # history: they import db/schema through its old path
        mine = layer(module)
        for target in sorted(targets):
            if target.startswith("<"):
                outside = target[1:-1].split(".")[0]
                if mine in NO_DJANGO and outside == "django":
                    found.append(f"{module} imports {target[1:-1]}: {mine}/ is Django-free")
                continue
            theirs = layer(target)
            if theirs in MUST_NOT_IMPORT.get(mine, ()):
                found.append(f"{module} imports {target}: {mine} must not import {theirs}")
            allowed = ONLY_IMPORTS.get(mine)
            if allowed is not None and theirs != mine and not _within(target, allowed):
                found.append(f"{module} imports {target}: {mine} imports only {allowed}")
    return found


def _within(target: str, allowed: tuple[str, ...]) -> bool:
    return any(target == prefix or target.startswith(prefix + ".") for prefix in allowed)


def cycles(edges: Mapping[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in edges.get(node, ()):
            if target not in edges:
                continue
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return found


@pytest.fixture(scope="module")
def edges() -> dict[str, set[str]]:
    return graph({name: path.read_text() for name, path in modules().items()})


def test_the_walk_sees_every_layer(edges: dict[str, set[str]]) -> None:
    seen = {layer(module) for module in edges}
    assert seen >= FOLDERS
    # Function-level imports count: apps.py imports autodiscovery only inside ready().
    assert "definitions.discovery" in edges["apps"]


def test_every_arrow_points_the_right_way(edges: dict[str, set[str]]) -> None:
    assert violations(edges) == []


def test_no_import_cycle(edges: dict[str, set[str]]) -> None:
    assert cycles(edges) == []


def test_a_wrong_arrow_is_caught() -> None:
    """The rules fail on what they forbid: the checker itself is not vacuous."""
    sources = {
        "": "",
        "exceptions": "",
        "models": "from django.db import models\nfrom .db import fields",
        "engine": "",
        "engine.steps": "def f():\n    import django.db\n    from ..db import store\n",
        "db": "",
        "db.fields": "",
        "db.store": "from ..worker import loop\nfrom ..verbs import runs",
        "worker": "",
        "worker.loop": "from ..db import store",
        "verbs": "",
        "verbs.runs": "from ..admin import views",
        "admin": "",
        "admin.views": "",
    }
    assert violations(graph(sources)) == [
        "db.store imports verbs.runs: db must not import verbs",
        "db.store imports worker.loop: db must not import worker",
        "engine.steps imports django.db: engine/ is Django-free",
        "engine.steps imports db.store: engine imports only ('engine', 'exceptions')",
        "verbs.runs imports admin.views: verbs must not import admin",
    ]
    assert cycles(graph(sources)) == [["db.store", "worker.loop"]]
