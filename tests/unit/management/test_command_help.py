"""Every argument of ``jobs`` and ``runjobs`` says what it is in ``--help`` (which
docs/reference/commands.md prints), and an option with a default says which."""

from __future__ import annotations

import argparse

import pytest
from django.core.management import get_commands, load_command_class


def parsers(name: str) -> list[tuple[str, argparse.ArgumentParser]]:
    parser = load_command_class(get_commands()[name], name).create_parser("manage.py", name)
    found: list[tuple[str, argparse.ArgumentParser]] = [(name, parser)]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            found += [(f"{name} {sub}", p) for sub, p in action.choices.items()]
    return found


OURS = [
    (title, action)
    for command in ("jobs", "runjobs")
    for title, parser in parsers(command)
    for action in parser._actions
    # Django's own options (--settings, -v, …) come from BaseCommand.
    if not isinstance(action, argparse._HelpAction | argparse._SubParsersAction)
    and action.dest not in ("version", "verbosity", "settings", "pythonpath", "traceback")
    and action.dest not in ("no_color", "force_color", "skip_checks")
]


@pytest.mark.parametrize(("title", "action"), OURS, ids=[f"{t} {a.dest}" for t, a in OURS])
def test_every_argument_has_help(title: str, action: argparse.Action) -> None:
    assert action.help, f"manage.py {title}: {action.metavar or action.dest} has no help"


def test_an_option_with_a_default_states_it() -> None:
    missing = [
        f"{title} {action.option_strings[0]}"
        for title, action in OURS
        if action.option_strings
        and action.default not in (None, False)
        and "default" not in (action.help or "").lower()
    ]
    assert missing == []


def test_the_drain_timeout_default_is_in_its_help() -> None:
    (drain,) = [a for t, a in OURS if t == "runjobs" and a.dest == "drain_timeout"]
    assert '"30s"' in str(drain.help) and drain.default == "30s"
