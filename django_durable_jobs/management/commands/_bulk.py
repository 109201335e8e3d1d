"""``manage.py jobs retry|cancel|replay`` over a filter instead of a run id: the
arguments, the checks on them and what is printed. The verb is ``verbs/bulk.py``'s."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.core.management.base import CommandError, CommandParser

from ...engine import clock
from ...models import RunStatus
from ...verbs import bulk

FILTERS = "--job, --status, --queue, --since, --error-code"
#: The past tense of each bulk verb, for what is printed.
DONE = {"retry": "retried", "cancel": "cancelled", "replay": "replayed"}


def add_filter_arguments(parser: CommandParser, verb: str) -> None:
    group = parser.add_argument_group(
        "acting on every run of a filter (instead of a run id; the options combine)"
    )
    group.add_argument("--job", metavar="NAME", help="Runs of this job.")
    group.add_argument(
        "--status",
        action="append",
        metavar="S",
        help=f"Runs in this status (repeatable): {', '.join(RunStatus.values)}.",
    )
    group.add_argument("--queue", metavar="Q", help="Runs of this queue.")
    group.add_argument(
        "--since", metavar="DURATION", help='Runs created at most this long ago, e.g. "3d".'
    )
    group.add_argument("--error-code", metavar="CODE", help="Runs that ended with this code.")
    group.add_argument(
        "--dry-run",
        action="store_true",
        help=f"Print how many runs it would {verb} and the first ids; change nothing.",
    )
    group.add_argument(
        "--batch-size",
        type=int,
        default=bulk.BATCH_SIZE,
        metavar="N",
        help=f"Runs per transaction (default {bulk.BATCH_SIZE}).",
    )


def chosen(options: dict[str, Any]) -> bulk.RunFilter | None:
    """The filter of a bulk verb, or ``None`` for one run by its id (then
    ``options["run_id"]`` and, for replay, ``options["step"]`` are set)."""
    found = bulk.run_filter(
        job=options["job"],
        statuses=options["status"] or (),
        queue=options["queue"],
        since=options["since"],
        error_code=options["error_code"],
    )
    words = options.get("words")
    if words is not None:  # replay: [RUN_ID] STEP
        if len(words) > 2 or (len(words) == 1 and not found):
            raise CommandError(f"replay takes RUN_ID STEP, or STEP with a filter ({FILTERS})")
        options["run_id"] = words[0] if len(words) == 2 else None
        options["step"] = words[-1]
    if found and options["run_id"] is not None:
        raise CommandError(
            "give a run id or a filter (--job, --status, --queue, --since, --error-code), not both"
        )
    if not found:
        if options["run_id"] is None:
            raise CommandError(f"give a run id, or a filter ({FILTERS})")
        if options["dry_run"]:
            raise CommandError("--dry-run goes with a filter")
        return None
    if options["batch_size"] < 1:
        raise CommandError("--batch-size must be at least 1")
    return found


def act(
    write: Callable[[str], None], verb: str, found: bulk.RunFilter, options: dict[str, Any]
) -> None:
    now = clock.current().now()
    if bulk.unregistered_job(found.job):
        write(f"note: no job named {found.job!r} is registered here")
    selected = found.runs(now)
    if options["dry_run"]:
        shown = bulk.preview(verb, selected, step=options.get("step"), now=now)
        if not shown.matched:
            write("no runs match")
            return
        other = shown.matched - shown.applicable - shown.without_step
        why = _why(verb, other, without_step=shown.without_step)
        write(
            f"would {verb} {shown.applicable} of {shown.matched} matching "
            f"run{'s' * (shown.matched != 1)}" + (f" ({why})" if why else "")
        )
        if shown.first_ids:
            write("first: " + " ".join(str(pk) for pk in shown.first_ids))
        return
    done = bulk.apply(
        verb, selected, step=options.get("step"), now=now, batch_size=options["batch_size"]
    )
    if not done.matched:
        write("no runs match")
        return
    write(outcome_line(done))


def outcome_line(done: bulk.Outcome) -> str:
    """``retried 2998 of 3000 matching runs in 6 batches; 2 skipped (...)``; a cancel
    says how many of its runs were cancelled along with a parent run that matched."""
    line = (
        f"{DONE[done.verb]} {done.done} of {done.matched} matching "
        f"run{'s' * (done.matched != 1)} in {done.batches} batch{'es' * (done.batches != 1)}"
    )
    if done.along:
        line += f" ({done.along} along with a parent run that matched too)"
    if done.skipped:
        other = done.skipped - done.changed - done.without_step
        why = _why(done.verb, other, changed=done.changed, without_step=done.without_step)
        line += f"; {done.skipped} skipped ({why})"
    return line


def _why(verb: str, other: int, *, changed: int = 0, without_step: int = 0) -> str:
    """Why runs are (or would be) left alone: ``1 in a status retry does not apply
    to, 2 changed by a worker meanwhile``."""
    return ", ".join(
        f"{n} {text}"
        for n, text in (
            (other, f"in a status {verb} does not apply to"),
            (changed, "changed by a worker meanwhile"),
            (without_step, "without that step"),
        )
        if n
    )
