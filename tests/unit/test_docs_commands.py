"""Every command the documentation tells a reader to type names a real command and real
options, so that a renamed option breaks this test instead of a reader's terminal
(CONTRIBUTING.md, "Documentation").

The commands of every ```bash block of the site's pages, the README, the CHANGELOG,
CONTRIBUTING.md and benchmarks/README.md, and the inline code that starts with one
(`manage.py jobs list --status failed`, `make test LEGS=py311-dj52`), and the commands of
a systemd unit's ``ExecStart=`` and of a Procfile:

- ``manage.py <command>`` (also ``python manage.py``, ``django-admin``, ``python -m
  django``): a management command of the test settings' apps; a block's arguments parse
  with the command's own parser, and an inline command's ``--options`` are its options;
- ``make <target> VAR=value``: a target and a variable of the Makefile;
- ``pip install …django-durable-jobs[extra]``: extras that pyproject.toml declares.

Every ```toml block parses. The tutorial's commands also run for real:
tests/processes/test_tutorial.py.
"""

from __future__ import annotations

import argparse
import re
import shlex
import tomllib
from functools import cache
from typing import cast

import pytest
from django.core.management import BaseCommand, get_commands, load_command_class

from tests.docs_pages import ROOT, all_blocks, blocks, commands, inline_code, pages

#: Pages of developers, whose commands are checked too.
DEVELOPERS = [ROOT / "CONTRIBUTING.md", ROOT / "benchmarks/README.md"]
#: Environment variables a `make` command line may set that the Makefile does not
#: declare: the example project's settings read them (make passes them on).
EXAMPLE_ENVIRONMENT = {"DATABASE_URL", "DEMO_SLEEP", "DEMO_FLAKY"}
#: Words that separate commands on one line.
SEPARATORS = {"&&", "||", ";", "|"}


def shell_commands() -> list[tuple[str, str]]:
    """``(where, command)`` of every shell block's commands, split at ``&&``, ``;``…"""
    found = []
    shell = [
        *all_blocks("bash", "sh", "shell", "console"),
        *(b for page in DEVELOPERS for b in blocks(page) if b.lang in ("bash", "sh")),
    ]
    for block in shell:
        for line in commands(block.code):
            found += [(block.where, part) for part in _split(shlex.split(line))]
    return found


def configured_commands() -> list[tuple[str, str]]:
    """The commands of a systemd unit's ``ExecStart=`` and of a Procfile's lines."""
    found = []
    for block in all_blocks("ini", "text"):
        for line in block.code.splitlines():
            match = re.fullmatch(r"(?:ExecStart=|[a-z]+: )(\S*python3? manage\.py .*)", line)
            if match:
                found.append((block.where, match.group(1)))
    return found


def inline_commands() -> list[tuple[str, str]]:
    """Inline code that starts with a command (``runjobs`` and ``jobs`` are ``manage.py``'s)."""
    starts = ("manage.py ", "python manage.py ", "make ", "django-admin ")
    found = []
    for page in [*pages(), *DEVELOPERS]:
        for code in inline_code(page):
            if code.startswith(("runjobs ", "jobs ")):
                code = "manage.py " + code
            if code.startswith(starts) and "…" not in code:
                found += [(page.name, part) for part in _split(shlex.split(code))]
    return found


def _split(words: list[str]) -> list[str]:
    parts: list[list[str]] = [[]]
    for word in words:
        if word in SEPARATORS:
            parts.append([])
        else:
            parts[-1].append(word)
    return [shlex.join(part) for part in parts if part]


def _without_prefixes(words: list[str]) -> list[str]:
    """The command without ``VAR=value`` assignments, ``env -u NAME`` and ``sudo``."""
    while words:
        if re.fullmatch(r"[A-Z_][A-Z0-9_]*=.*", words[0]) or words[0] == "sudo":
            words = words[1:]
        elif words[0] == "env":
            words = words[1:]
            while words and words[0] == "-u":
                words = words[2:]
        else:
            break
    return words


def management_argv(words: list[str]) -> list[str] | None:
    """The arguments after ``manage.py`` (the command's name first), or None."""
    if words[:1] == ["django-admin"]:
        return words[1:]
    if words[:1] == ["manage.py"]:
        return words[1:]
    if words and re.fullmatch(r"(.*/)?python3?(\.\d+)?", words[0]):
        if words[1:2] == ["manage.py"]:
            return words[2:]
        if words[1:3] == ["-m", "django"]:
            return words[3:]
    return None


@cache
def parser_of(name: str) -> argparse.ArgumentParser:
    command: BaseCommand = load_command_class(get_commands()[name], name)
    return command.create_parser("manage.py", name)


def _options(parser: argparse.ArgumentParser) -> set[str]:
    return {s for action in parser._actions for s in action.option_strings}


def _subparser(parser: argparse.ArgumentParser, words: list[str]) -> argparse.ArgumentParser:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction) and words:
            assert words[0] in action.choices, f"no subcommand {words[0]!r}"
            return cast(argparse.ArgumentParser, action.choices[words[0]])
    return parser


@cache
def makefile() -> tuple[set[str], set[str]]:
    """The Makefile's targets and variables."""
    text = (ROOT / "Makefile").read_text()
    targets = set(re.findall(r"^([\w./%-]+)\s*:(?!=)", text, re.M))
    variables = set(re.findall(r"^([A-Z_][A-Z0-9_]*)\s*(?:\?=|:=|\+=|=)", text, re.M))
    return targets, variables


def check_make(words: list[str]) -> None:
    targets, variables = makefile()
    for word in (w.strip("[]") for w in words[1:]):  # [VAR=value]: an optional one
        if word.startswith("-"):
            continue
        if "=" in word:
            name = word.split("=", 1)[0]
            assert name in variables | EXAMPLE_ENVIRONMENT, f"no Makefile variable {name}"
        else:
            assert word in targets, f"no Makefile target {word!r}"


def check_pip(words: list[str]) -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = set(project["optional-dependencies"])
    for word in words:
        match = re.search(r"django[-_]durable[-_]jobs[^\[]*\[([\w,]+)\]", word)
        if match:
            asked = set(match.group(1).split(","))
            assert asked <= extras, f"no extra {sorted(asked - extras)} (extras: {sorted(extras)})"


def check(command: str, *, full: bool) -> None:
    """``full``: the arguments must parse (a block); else only the options must exist."""
    words = _without_prefixes(shlex.split(command))
    if not words:
        return
    if words[0] == "make":
        check_make(words)
        return
    if words[:2] in (["pip", "install"], ["python", "-m"]) or words[:1] == ["pip"]:
        check_pip(words)
        return
    argv = management_argv(words)
    if argv is None or not argv:
        return
    name, args = argv[0], argv[1:]
    assert name in get_commands(), f"no management command {name!r}"
    parser = parser_of(name)
    if full:
        parser.parse_args(args)  # CommandError on a bad argument
        return
    sub = _subparser(parser, [a for a in args if not a.startswith("-")][:1])
    known = _options(sub)
    for word in (a.strip("[]") for a in args):
        if word.startswith("--"):
            assert word.split("=", 1)[0] in known, f"{name}: no option {word}"


@pytest.mark.parametrize(("where", "command"), shell_commands())
def test_a_shell_block_command_names_real_commands_and_options(where: str, command: str) -> None:
    check(command, full=True)


@pytest.mark.parametrize(("where", "command"), configured_commands())
def test_a_configured_command_names_real_commands_and_options(where: str, command: str) -> None:
    check(command, full=True)


@pytest.mark.parametrize(("where", "command"), inline_commands())
def test_an_inline_command_names_real_commands_and_options(where: str, command: str) -> None:
    check(command, full=False)


def test_the_checks_catch_a_renamed_option_command_target_and_extra() -> None:
    for wrong in [
        "python manage.py runjobs --bust",
        "python manage.py jobs lst",
        "python manage.py runjob",
        "make tests",
        "make test LEG_S=py311-dj52",
        'pip install "django-durable-jobs[postgresql]"',
    ]:
        with pytest.raises(Exception):  # noqa: B017, PT011 - any refusal will do
            check(wrong, full=True)
    with pytest.raises(AssertionError):
        check("manage.py jobs list --state failed", full=False)


def test_the_docs_have_commands_to_check() -> None:
    assert len(shell_commands()) >= 40
    assert len(inline_commands()) >= 20
    assert len(configured_commands()) >= 3  # the systemd unit's, the Procfile's


def test_every_toml_block_parses() -> None:
    for block in all_blocks("toml"):
        tomllib.loads(block.code)
