"""The documentation's Python samples and reference tables checked against the code, so
a page cannot silently rot (CONTRIBUTING.md, "Documentation").

Every ```python block of every page (docs/, the README, the CHANGELOG) must parse and use
no name it neither imports nor defines, nor an earlier block of its page bound, apart from
the reader's own functions and objects that each page leaves to the reader (``YOURS``).
Every block that defines jobs runs, and its jobs register. The reference pages list
exactly what the code has: ``@job``'s options, the settings, the error codes, the
signals, the statuses, the models' fields, the ``jobs`` subcommands and ``runjobs``'s
options. Every file a page cites exists.
"""

from __future__ import annotations

import argparse
import ast
import builtins
import inspect
import re
import types
from pathlib import Path
from typing import Any

import pytest

from django_durable_jobs.definitions import registry
from tests.docs_pages import ROOT, Block, all_blocks, block_under, blocks, pages, section

#: The reader's own functions and objects, which a page's samples call but leave to the
#: reader to write (a model, a helper that sends an email, an API client).
YOURS = {
    "README.md": {"send_welcome"},
    "docs/index.md": {"load_user", "send_welcome"},
    "docs/reference/jobs.md": {"load_user", "send_welcome", "send_nudge"},
    "docs/reference/steps.md": {"Order", "send_receipt"},
    "docs/reference/django-tasks.md": {"payments"},
    "docs/how-to/events.md": {"Order"},
    "docs/how-to/flow-control.md": {
        "crm",
        "api",
        "changes_since_last_digest",
        "mail_digest",
        "send_we_miss_you",
        "send_reminder",
        "pager",
    },
    "docs/how-to/schedules.md": {"build_report"},
    "docs/how-to/fan-out.md": {
        "load_order",
        "send_invoice",
        "paid_orders_of",
        "yesterday",
        "send_report",
    },
    "docs/how-to/async.md": {"save_items"},
    "docs/how-to/changing-code.md": {
        "load_user",
        "send_welcome",
        "send_sms",
        "send_tips",
        "charge_card",
        "charge_card_cents",
        "send_receipt",
        "order_total",
        "send_invoice",
    },
    "docs/how-to/operating.md": {"run_id"},
    "docs/how-to/databases.md": {"Order", "customer", "total", "send_receipt"},
    # Excerpts of example_project/shop/ (test_the_example_excerpts_are_the_example_s_code).
    "docs/tutorial/example-project.md": {
        "Any",
        "job",
        "settings",
        "load_customer",
        "send_welcome",
        "send_nudge",
        "receipt",
        "publish_on",
        "post_save",
        "Order",
        "InlineJobs",
        "Customer",
    },
}

#: Blocks that define jobs but are not run here, and why.
NOT_RUN = {
    ("docs/how-to/async.md", "Async views and jobs"): "imports httpx, not a dependency",
    ("docs/tutorial/example-project.md", "What it shows"): "an excerpt of the example's code",
}


def python_blocks() -> list[Block]:
    return all_blocks("python")


def undefined_names(code: str) -> set[str]:
    """Names the code reads but never imports, assigns, defines or takes as a parameter."""
    read, bound = _names(code)
    return read - bound


def _names(code: str) -> tuple[set[str], set[str]]:
    tree = ast.parse(code)
    read: set[str] = set()
    bound: set[str] = set(dir(builtins))
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            (read if isinstance(node.ctx, ast.Load) else bound).add(node.id)
        elif isinstance(node, ast.alias):
            bound.add((node.asname or node.name).split(".")[0])
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound.add(node.name)
        elif isinstance(node, ast.arg):
            bound.add(node.arg)
        elif isinstance(node, ast.ExceptHandler) and node.name:  # except E as name
            bound.add(node.name)
    return read, bound


def defines_jobs(code: str) -> bool:
    """Whether the code decorates a function with ``@job`` (bare or called)."""
    for node in ast.walk(ast.parse(code)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for decorator in node.decorator_list:
                target = decorator.func if isinstance(decorator, ast.Call) else decorator
                if isinstance(target, ast.Name) and target.id == "job":
                    return True
    return False


def job_blocks() -> list[Block]:
    return [b for b in python_blocks() if defines_jobs(b.code)]


def run_block(block: Block, namespace: dict[str, Any] | None = None) -> dict[str, Any]:
    """Execute a block as a module of its own, the reader's names given as stand-ins."""
    module = types.ModuleType("docs_" + re.sub(r"\W", "_", block.page)).__dict__
    module.update({name: _Yours(name) for name in YOURS.get(block.page, ())})
    module.update(namespace or {})
    exec(compile(block.code, block.where, "exec"), module)
    return module


class _Yours:
    """A stand-in for one of the reader's objects: anything may be called or read on it."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __getattr__(self, attribute: str) -> _Yours:
        return _Yours(f"{self.name}.{attribute}")

    def __call__(self, *args: Any, **kwargs: Any) -> _Yours:
        return self


@pytest.fixture
def empty_registry(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """No job registered, and the registry as it was afterwards: the samples' job names
    (``shop.onboarding``) are the example project's, which the test settings install."""
    jobs: dict[str, Any] = {}
    monkeypatch.setattr(registry, "_registry", jobs)
    monkeypatch.setattr(registry, "_versions", {})  # every version of each name
    return jobs


def test_every_python_block_of_the_docs_parses() -> None:
    found = python_blocks()
    assert len(found) >= 40
    for block in found:
        try:
            ast.parse(block.code)
        except SyntaxError as exc:  # pragma: no cover - the failure message
            pytest.fail(f"{block.where} does not parse: {exc}\n{block.code}")


@pytest.mark.parametrize("page", [p for p in pages() if blocks(p)], ids=lambda p: p.name)
def test_every_python_block_imports_or_defines_the_names_it_uses(page: Path) -> None:
    """Names may come from an earlier block of the same page (a sample that goes on)."""
    earlier: set[str] = set()
    name = page.relative_to(ROOT).as_posix()
    for block in blocks(page):
        if block.lang != "python":
            continue
        read, bound = _names(block.code)
        missing = read - bound - earlier - YOURS.get(name, set())
        assert not missing, f"{block.where} uses names it never imports: {sorted(missing)}"
        earlier |= bound


def test_the_readers_names_of_each_page_are_used_on_it() -> None:
    """``YOURS`` names only what a page's samples use: a stale entry would hide a typo."""
    for page, names in YOURS.items():
        used: set[str] = set()
        for block in blocks(ROOT / page):
            if block.lang == "python":
                used |= _names(block.code)[0]
        assert names <= used, f"{page}: {sorted(names - used)} are not used there"


@pytest.mark.parametrize("block", job_blocks(), ids=lambda b: f"{b.page}:{b.line}")
def test_the_job_definitions_of_the_docs_register(
    block: Block, empty_registry: dict[str, Any]
) -> None:
    if (block.page, block.heading) in NOT_RUN:
        pytest.skip(NOT_RUN[(block.page, block.heading)])
    namespace = run_block(block)
    defined = {v.name for v in namespace.values() if isinstance(v, registry.JobDefinition)}
    assert defined and set(empty_registry) == defined


def test_the_flow_control_recipes_have_the_options_they_describe(
    empty_registry: dict[str, Any],
) -> None:
    jobs: dict[str, Any] = {}
    for block in blocks(ROOT / "docs/how-to/flow-control.md"):
        if block.lang == "python":
            jobs.update(run_block(block))
    sync = jobs["sync_customer"]
    assert sync.concurrency.limit == 2 and sync.throttle.limit == 10
    assert jobs["push_order"].throttle.limit == 100
    assert jobs["send_edit_digest"].debounce is not None
    assert jobs["we_miss_you"].rate_limit.limit == 1
    assert jobs["dunning"].cancel_on[0].event == "invoice.paid"
    assert jobs["dunning"].on_failure == jobs["alert_ops"].name == "billing.alert_ops"


def test_the_example_excerpts_are_the_example_s_code() -> None:
    """The example project's page quotes example_project/shop/: every code line of its
    excerpts is in the file it quotes (comments and spacing aside)."""
    sources = {
        "jobs.py": (ROOT / "example_project/shop/jobs.py").read_text(),
        "apps.py": (ROOT / "example_project/shop/apps.py").read_text(),
        "test": (ROOT / "tests/integration/test_example_project.py").read_text(),
    }
    quoted = [b for b in blocks(ROOT / "docs/tutorial/example-project.md") if b.lang == "python"]
    assert len(quoted) == 3
    for block, source in zip(quoted, sources.values(), strict=True):
        bare = "".join(source.split())
        for line in block.code.splitlines():
            code = line.split("  #")[0].strip()
            if code and not code.startswith("#"):
                assert "".join(code.split()) in bare, f"{block.where}: {code!r} is not there"


# -- the reference pages list what the code has ---------------------------------------


def table_column(text: str) -> set[str]:
    """The backquoted names in the first column of a table's rows."""
    return set(re.findall(r"^\| `([A-Z_0-9]+)` \|", text, re.M))


def test_the_job_options_table_lists_every_option_of_job() -> None:
    from django_durable_jobs import job

    options = [
        p.name for p in inspect.signature(job).parameters.values() if p.kind == p.KEYWORD_ONLY
    ]
    table = section("docs/reference/jobs.md", "Defining a job")
    listed = re.findall(r"^\| `(\w+)` \| ", table, re.M)
    assert listed == options


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    [sub] = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(sub.choices)


def test_the_commands_reference_lists_every_jobs_subcommand() -> None:
    from django_durable_jobs.management.commands.jobs import Command

    parser = Command().create_parser("manage.py", "jobs")
    synopsis = section("docs/reference/commands.md", "`jobs`")
    listed = re.findall(r"^manage\.py jobs (\w+)", synopsis, re.M)
    assert sorted(listed) == sorted(_subcommands(parser))


def test_the_runjobs_table_lists_every_option_of_runjobs() -> None:
    from django.core.management.base import BaseCommand

    from django_durable_jobs.management.commands.runjobs import Command

    def options(command: BaseCommand) -> set[str]:
        parser = command.create_parser("manage.py", "runjobs")
        return {s for a in parser._actions for s in a.option_strings if s.startswith("--")}

    ours = options(Command()) - options(BaseCommand())
    table = section("docs/reference/commands.md", "`runjobs`")
    assert set(re.findall(r"^\| `(--[\w-]+)", table, re.M)) == ours


def test_the_models_reference_lists_every_field_of_the_public_models() -> None:
    from django.apps import apps

    text = (ROOT / "docs/reference/models.md").read_text()
    for name in ["JobRun", "StepRecord", "Event", "Schedule", "Worker"]:
        entry = re.search(rf"^- `{name}`: (.*?)(?=\n- |\n\n)", text, re.S | re.M)
        assert entry, f"docs/reference/models.md has no entry for {name}"
        listed = set(re.findall(r"`(\w+)`", entry.group(1)))
        model = apps.get_model("django_durable_jobs", name)
        fields = {f.name for f in model._meta.get_fields() if f.concrete} - {"id"}
        assert fields <= listed, f"models.md, {name}: {sorted(fields - listed)} missing"


def test_the_settings_reference_lists_every_setting() -> None:
    from django_durable_jobs.conf import DEFAULTS

    assert table_column((ROOT / "docs/reference/settings.md").read_text()) == set(DEFAULTS)


def test_the_errors_reference_lists_every_public_error_code() -> None:
    import django_durable_jobs
    from django_durable_jobs.db.migrated import NotMigrated
    from django_durable_jobs.exceptions import DurableJobsError

    exported = [getattr(django_durable_jobs, name) for name in django_durable_jobs.__all__]
    errors = [e for e in exported if isinstance(e, type) and issubclass(e, DurableJobsError)]
    codes = ({e.code for e in errors} | {NotMigrated.code}) - {DurableJobsError.code}
    assert table_column((ROOT / "docs/reference/errors.md").read_text()) == codes


def test_the_signals_reference_lists_every_signal() -> None:
    from django.dispatch import Signal

    from django_durable_jobs import signals

    sent = {name for name, value in vars(signals).items() if isinstance(value, Signal)}
    text = (ROOT / "docs/reference/signals.md").read_text()
    assert set(re.findall(r"^\| `(\w+)\(", text, re.M)) == sent


def test_the_statuses_the_docs_list_are_the_codes() -> None:
    from django_durable_jobs.models import RunStatus, StepStatus

    jobs = section("docs/reference/jobs.md", "Starting runs")
    run_statuses = re.search(r"- Run statuses: (.*?)(?=\n- |\n\n|\Z)", jobs, re.S)
    assert run_statuses
    assert set(re.findall(r"`([a-z]+)`", run_statuses.group(1))) == set(RunStatus.values)
    steps = (ROOT / "docs/reference/steps.md").read_text()
    step_statuses = re.search(r"^Step statuses: (.*)$", steps, re.M)
    assert step_statuses
    assert set(re.findall(r"`(\w+)`", step_statuses.group(1))) == {s.value for s in StepStatus}


# -- what the pages cite --------------------------------------------------------------

#: Files of the reader's own project that the pages name (settings.py, your jobs.py).
READERS_FILES = {
    "settings.py",
    "urls.py",
    "jobs.py",
    "tasks.py",
    "admin.py",
    "apps.py",
    "tests.py",
    "views.py",
    "pyproject.toml",
    "db.sqlite3",
}
#: The browser tier's screenshots in .tmp/artifacts/, which CONTRIBUTING.md names.
ARTIFACTS = {"dashboard-wide-light.png", "workers-wide-light.png", "timeline-dark.png"}


def test_the_files_the_docs_cite_exist() -> None:
    places = [ROOT, ROOT / "django_durable_jobs", ROOT / "example_project", ROOT / "docs"]
    tutorial = ROOT / "docs/tutorial/first-flow.md"
    for page in [*pages(), ROOT / "CONTRIBUTING.md"]:
        text = page.read_text(encoding="utf-8")
        cited = set(re.findall(r"`((?:[\w.-]+/)*[\w-]+\.(?:py|md|png|toml|sql))`", text))
        if page == tutorial:  # the files the tutorial itself writes
            cited = {c for c in cited if not c.startswith(("newsletter/", "mysite/"))}
        missing = {
            f
            for f in cited - READERS_FILES - ARTIFACTS
            if not any((p / f).exists() for p in places)
        }
        assert not missing, f"{page.name} cites files that do not exist: {sorted(missing)}"


def test_every_test_the_docs_name_exists() -> None:
    """The guarantees (and any page) name the test that proves each one:
    ``tests/…/test_x.py::test_name`` must be a test function of that file, and a
    ``test_fault_matrix[…]`` case a kind and a point of its matrix."""
    from tests.processes.test_faults import KINDS, POSITIONS

    kinds = sorted(KINDS, key=len, reverse=True)  # "async-atomic-" before "async-"

    named = 0
    for page in pages():
        text = re.sub(r"::\s+", "::", page.read_text(encoding="utf-8"))
        for path, test in re.findall(r"(tests/[\w/]+\.py)::(\w+)", text):
            defined = re.search(rf"^(async )?def {test}\(", (ROOT / path).read_text(), re.M)
            assert defined, f"{page.name}: {path}::{test}"
            named += 1
        for case in re.findall(r"test_fault_matrix\[([^\]]+)\]", text):
            rest = case.removeprefix(next(k for k in kinds if case.startswith(k)))
            assert rest == "*" or rest.split("-")[0] in POSITIONS, f"{page.name}: {case}"
    assert named >= 10


def test_the_readme_stays_short_and_links_into_the_docs() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) <= 250
    linked = set(re.findall(r"\]\((docs/[^)#]+\.md)", readme))
    assert {"docs/tutorial/first-flow.md", "docs/how-to/install.md"} <= linked
    for link in linked:
        assert (ROOT / link).exists(), link


def test_the_quickstart_shows_what_a_project_needs() -> None:
    """The README's quickstart: the install line, INSTALLED_APPS, a PostgreSQL DATABASES,
    a job, and the commands that migrate, enqueue and run it."""
    readme = "\n".join(b.code for b in blocks(ROOT / "README.md") if b.heading == "Quickstart")
    for shown in [
        'pip install "django-durable-jobs[postgres]"',
        'INSTALLED_APPS += ["django_durable_jobs"]',
        "django.db.backends.postgresql",
        "@job(",
        "python manage.py migrate",
        ".enqueue(",
        "python manage.py runjobs",
    ]:
        assert shown in readme, shown
    assert block_under("README.md", "Quickstart", 1).startswith("# yourapp/jobs.py")
