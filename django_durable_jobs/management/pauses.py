"""``manage.py jobs pause``, ``jobs resume`` and ``jobs pauses``: the parsers and the
printing; the verbs are ``verbs/pauses.py``'s."""

from __future__ import annotations

import getpass
import json
from collections.abc import Callable
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from ..observe import stats, trace, trace_text
from ..verbs import pauses
from ..worker.pauses import described

HEADERS = ("kind", "name", "paused", "by", "reason")


def add_parsers(sub: Any) -> None:
    """The three actions' parsers, on ``jobs``' subparsers."""
    for action, help_text in (
        ("pause", "Pause a queue or a job: no worker claims its runs until resumed."),
        ("resume", "Resume a paused queue or job."),
    ):
        parser = sub.add_parser(action, help=help_text)
        # Not argparse's required group: its error is a usage block, not one line.
        parser.add_argument("--queue", metavar="Q", help="A queue (any name).")
        parser.add_argument("--job", metavar="NAME", help="A registered job.")
        if action == "pause":
            parser.add_argument("--reason", metavar="TEXT", help="Shown with it.")
            parser.add_argument(
                "--by", default=None, metavar="WHO", help="Who paused it (default: $USER)."
            )
    listed = sub.add_parser("pauses", help="The queues and jobs paused.")
    listed.add_argument("--json", action="store_true", help="Print them as JSON.")


def actions(command: BaseCommand) -> dict[str, Callable[[dict[str, Any]], None]]:
    """The handlers of ``add_parsers``' actions, writing to ``command``'s stdout."""
    return {
        "pause": lambda options: pause(command, options),
        "resume": lambda options: resume(command, options),
        "pauses": lambda options: listing(command, options),
    }


def target(options: dict[str, Any]) -> tuple[str, str]:
    """(kind, name) from ``--queue`` or ``--job``: exactly one of them."""
    queue, job = options["queue"], options["job"]
    if (queue is None) == (job is None):
        raise CommandError(f"jobs {options['action']}: give either --queue Q or --job NAME")
    return ("queue", queue) if queue is not None else ("job", job)


def pause(command: BaseCommand, options: dict[str, Any]) -> None:
    kind, name = target(options)
    by = options["by"] if options["by"] is not None else _user()
    done = pauses.pause(kind, name, reason=options["reason"] or "", by=by)
    row = done.pause
    if done.created:
        text = f"paused {kind} {name}{described(row.reason, row.paused_by)}"
        text += ": workers stop claiming its runs within one poll; running runs finish"
    else:
        text = f"{kind} {name} was paused already, since {trace.stamp(row.paused_at)}"
        text += described(row.reason, row.paused_by)
    command.stdout.write(command.style.SUCCESS(text))
    if done.unknown_queue:
        command.stdout.write(
            f"note: no registered job uses queue {name!r} and no run is in it "
            "(queues are free-form: it is paused all the same)"
        )


def resume(command: BaseCommand, options: dict[str, Any]) -> None:
    kind, name = target(options)
    if pauses.resume(kind, name):
        command.stdout.write(
            command.style.SUCCESS(f"resumed {kind} {name}: workers claim its runs within one poll")
        )
    else:
        command.stdout.write(f"{kind} {name} was not paused")


def listing(command: BaseCommand, options: dict[str, Any]) -> None:
    if options["json"]:
        command.stdout.write(json.dumps(stats.pauses(), indent=2, ensure_ascii=False))
        return
    found = pauses.current()
    if not found:
        command.stdout.write("nothing paused")
        return
    cells = [(p.kind, p.name, trace.stamp(p.paused_at), p.paused_by, p.reason) for p in found]
    for line in trace_text.text_table(HEADERS, cells):
        command.stdout.write(line)


def _user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no login name (a container's uid without an entry)
        return ""
