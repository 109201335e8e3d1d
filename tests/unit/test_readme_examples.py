"""The README's code samples run against the code, so the README cannot silently rot.

Each ```python block is taken from README.md itself: every block must parse, the job
definitions must import (with every name they use imported or defined in the block,
apart from the helper functions the README leaves to the reader), and the testing
helpers' example must pass as a test on the example project.
"""

import ast
import builtins
import re
import textwrap
import types
from pathlib import Path
from typing import Any

import pytest

from django_durable_jobs.definitions import registry

README = Path(__file__).resolve().parents[2] / "README.md"

# The reader's own functions and objects, which the samples call but do not define.
YOURS = {
    "Defining a job": {"load_user", "send_welcome", "send_nudge"},
    "Flow control": {"crm", "pager", "send_reminder"},
    "Schedules": {"build_report"},
    "Fan-out": {"load_order", "send_invoice", "paid_orders_of", "yesterday", "send_report"},
    "Results and messages": {"quote_refund", "order_lines", "refund_line"},
}


def python_blocks() -> list[tuple[str, str]]:
    """(the ``##``/``###`` heading above it, its code) for each ```python block."""
    blocks: list[tuple[str, str]] = []
    heading = ""
    fence = re.compile(r"^([ \t]*)```python\n(.*?)^\1```", re.S | re.M)
    for part in re.split(r"^(#{2,3} .*)$", README.read_text(encoding="utf-8"), flags=re.M):
        if re.match(r"#{2,3} ", part):
            heading = part.lstrip("#").strip()
            continue
        blocks += [(heading, textwrap.dedent(m.group(2))) for m in fence.finditer(part)]
    return blocks


def block_of(section: str, index: int = 0) -> str:
    """The ``index``-th python block under the heading ``section``."""
    found = [code for heading, code in python_blocks() if heading == section]
    assert len(found) > index, f"no python block {index} under {section!r}"
    return found[index]


def undefined_names(code: str) -> set[str]:
    """Names the block reads but never imports, assigns, defines or takes as a parameter."""
    tree = ast.parse(code)
    read: set[str] = set()
    bound: set[str] = set(dir(builtins))
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            (read if isinstance(node.ctx, ast.Load) else bound).add(node.id)
        elif isinstance(node, ast.alias):
            bound.add((node.asname or node.name).split(".")[0])
        elif isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            bound.add(node.name)
        elif isinstance(node, ast.arg):
            bound.add(node.arg)
    return read - bound


def run_block(code: str, module: str) -> dict[str, Any]:
    """Execute ``code`` as module ``module``. Its ``shop.*`` job names are renamed so
    that they do not collide with the example project's jobs of the same names, and
    ``shop`` is imported as the test settings install it."""
    code = code.replace('"shop.', '"readme_shop.')
    code = code.replace("from shop.", "from example_project.shop.")
    namespace = types.ModuleType(module).__dict__
    exec(compile(code, f"README.md ({module})", "exec"), namespace)
    return namespace


@pytest.fixture
def forget_new_jobs() -> Any:
    before = set(registry.all_jobs())
    yield
    for name in set(registry.all_jobs()) - before:
        registry.unregister(name)


def test_every_python_block_of_the_readme_parses() -> None:
    blocks = python_blocks()
    assert len(blocks) >= 15
    for heading, code in blocks:
        try:
            ast.parse(code)
        except SyntaxError as exc:  # pragma: no cover - the failure message
            pytest.fail(f"README block under {heading!r} does not parse: {exc}\n{code}")


@pytest.mark.parametrize("section", sorted(YOURS))
def test_the_job_definitions_import_everything_they_use(section: str) -> None:
    missing = undefined_names(block_of(section)) - YOURS[section]
    assert not missing, f"README {section!r} uses names it never imports: {sorted(missing)}"


# Samples that continue one above: the names they take from it (or from the reader).
ELSEWHERE = {
    "Starting runs": {"onboarding"},
    "Events": {"Order"},
    "Runs about your objects": set(),
    "Figures and metrics": set(),
    "From code and the terminal": {"run_id"},
    "Testing your jobs": set(),
    "Results and messages": {"refund", "quote_refund", "order_lines", "refund_line"},
}


@pytest.mark.parametrize("section", sorted(ELSEWHERE))
def test_the_other_samples_import_what_they_use(section: str) -> None:
    for code in [code for heading, code in python_blocks() if heading == section]:
        missing = undefined_names(code) - ELSEWHERE[section]
        assert not missing, f"README {section!r} uses names it never imports: {sorted(missing)}"


@pytest.mark.parametrize("section", sorted(YOURS))
def test_the_job_definitions_register(section: str, forget_new_jobs: None) -> None:
    before = set(registry.all_jobs())
    namespace = run_block(block_of(section), "readme_" + section.lower().replace(" ", "_"))
    added = set(registry.all_jobs()) - before
    defined = {v.name for v in namespace.values() if isinstance(v, registry.JobDefinition)}
    assert added and added == defined


def test_the_flow_control_sample_has_the_options_it_describes(forget_new_jobs: None) -> None:
    namespace = run_block(block_of("Flow control"), "readme_flow_control")
    sync = namespace["sync_order"]
    assert sync.concurrency.limit == 2 and sync.throttle.limit == 10
    assert sync.on_failure == "readme_shop.alert_ops"
    assert namespace["we_miss_you"].rate_limit.limit == 1
    assert namespace["dunning"].cancel_on[0].event == "invoice.paid"


def section_text(title: str) -> str:
    """The README's text from the heading ``title`` to the next heading of any level."""
    text = README.read_text(encoding="utf-8")
    match = re.search(rf"^#{{2,3}} {re.escape(title)}\n(.*?)(?=^#{{2,3}} )", text, re.S | re.M)
    assert match, f"README has no section {title!r}"
    return match.group(1)


def table_column(text: str) -> set[str]:
    """The backquoted names in the first column of a table's rows."""
    return set(re.findall(r"^\| `([A-Z_0-9]+)` \|", text, re.M))


def test_the_job_options_table_lists_every_option_of_job() -> None:
    import inspect

    from django_durable_jobs import job

    options = [
        p.name for p in inspect.signature(job).parameters.values() if p.kind == p.KEYWORD_ONLY
    ]
    listed = re.findall(r"^\| `(\w+)` \| ", section_text("Defining a job"), re.M)
    assert listed == options


def test_the_terminal_section_lists_every_jobs_subcommand() -> None:
    import argparse

    from django_durable_jobs.management.commands.jobs import Command

    parser = Command().create_parser("manage.py", "jobs")
    [sub] = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    listed = re.findall(r"^manage\.py jobs (\w+)", section_text("From code and the terminal"), re.M)
    assert sorted(listed) == sorted(sub.choices)


def test_the_models_section_lists_every_field_of_the_public_models() -> None:
    from django.apps import apps

    text = section_text("Models")
    for name in ["JobRun", "StepRecord", "Event", "Schedule", "Worker"]:
        entry = re.search(rf"^- `{name}`: (.*?)(?=\n- |\n\n)", text, re.S | re.M)
        assert entry, f"README Models has no entry for {name}"
        listed = set(re.findall(r"`(\w+)`", entry.group(1)))
        model = apps.get_model("django_durable_jobs", name)
        fields = {f.name for f in model._meta.get_fields() if f.concrete} - {"id"}
        assert fields <= listed, f"README Models, {name}: {sorted(fields - listed)} missing"


def test_the_settings_table_lists_every_setting() -> None:
    from django_durable_jobs.conf import DEFAULTS

    assert table_column(section_text("Settings")) == set(DEFAULTS)


def test_the_errors_table_lists_every_public_error_code() -> None:
    import django_durable_jobs
    from django_durable_jobs.db.migrated import NotMigrated
    from django_durable_jobs.exceptions import DurableJobsError

    exported = [getattr(django_durable_jobs, name) for name in django_durable_jobs.__all__]
    errors = [e for e in exported if isinstance(e, type) and issubclass(e, DurableJobsError)]
    codes = ({e.code for e in errors} | {NotMigrated.code}) - {DurableJobsError.code}
    assert table_column(section_text("Errors")) == codes


def test_the_signals_and_statuses_the_readme_lists_are_the_codes() -> None:
    from django.dispatch import Signal

    from django_durable_jobs import signals
    from django_durable_jobs.models import RunStatus, StepStatus

    sent = {name for name, value in vars(signals).items() if isinstance(value, Signal)}
    listed = re.search(
        r"- Signals \(`django_durable_jobs\.signals`.*?(?=\n- |\n\n)", README.read_text(), re.S
    )
    assert listed and set(re.findall(r"`(\w+)\(", listed.group(0))) == sent
    run_statuses = re.search(
        r"- Run statuses: (.*?)(?=\n- |\n\n)", section_text("Starting runs"), re.S
    )
    assert run_statuses and set(re.findall(r"`([a-z]+)`", run_statuses.group(1))) == set(
        RunStatus.values
    )
    step_statuses = re.search(r"^Step statuses: (.*)$", section_text("The step API"), re.M)
    assert step_statuses and set(re.findall(r"`(\w+)`", step_statuses.group(1))) == {
        status.value for status in StepStatus
    }


def test_the_files_the_readme_cites_exist() -> None:
    root = README.parent
    cited = set(re.findall(r"`((?:[\w.-]+/)*[\w-]+\.(?:py|md|png|toml))`", README.read_text()))
    cited |= set(re.findall(r"\]\(((?:docs|benchmarks)/[^)]+)\)", README.read_text()))
    places = [root, root / "django_durable_jobs", root / "example_project", root / "benchmarks"]
    yours = {"settings.py", "urls.py", "jobs.py", "tasks.py", "admin.py", "pyproject.toml"}
    missing = {f for f in cited - yours if not any((place / f).exists() for place in places)}
    assert not missing, f"README cites files that do not exist: {sorted(missing)}"


def anchor(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to dashes."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_the_contents_list_every_section_and_every_link_has_its_heading() -> None:
    text = README.read_text(encoding="utf-8")
    headings = re.findall(r"^#{2,3} (.+)$", text, re.M)
    contents = text.split("**Contents**", 1)[1].split("\n## ", 1)[0]
    assert re.findall(r"^ *- \[(.+)\]\(#", contents, re.M) == headings
    anchors = {anchor(heading) for heading in headings}
    assert set(re.findall(r"\]\(#([^)]+)\)", text)) <= anchors
