"""``manage-help``: a management command's own ``--help``, printed into the page when the
site is built, so the commands reference cannot fall behind the commands' options.

In a page::

    ```{manage-help} runjobs
    ```

prints ``manage.py runjobs --help``; for a command with subcommands (``jobs``), the help of
each subcommand follows its own. The width is fixed, so a build does not depend on the
terminal it runs in.
"""

from __future__ import annotations

import argparse
import os
from typing import Any

from django.core.management import get_commands, load_command_class
from docutils import nodes
from sphinx.util.docutils import SphinxDirective

#: Columns of the printed help (argparse reads COLUMNS).
WIDTH = "88"


def command_help(name: str) -> list[tuple[str, str]]:
    """``(title, help text)`` of ``manage.py <name>`` and of each of its subcommands."""
    parser = load_command_class(get_commands()[name], name).create_parser("manage.py", name)
    before = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = WIDTH
    try:
        helps = [(f"manage.py {name}", parser.format_help())]
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                helps += [
                    (f"manage.py {name} {sub}", subparser.format_help())
                    for sub, subparser in action.choices.items()
                ]
    finally:
        if before is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = before
    return helps


class ManageHelp(SphinxDirective):
    required_arguments = 1

    def run(self) -> list[nodes.Node]:
        name = self.arguments[0]
        if name not in get_commands():
            raise self.error(f"no management command {name!r}")
        out: list[nodes.Node] = []
        for title, text in command_help(name):
            block = nodes.literal_block(text, text, language="text")
            out += [nodes.rubric(title, title), block]
        return out


def setup(app: Any) -> dict[str, Any]:
    app.add_directive("manage-help", ManageHelp)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
