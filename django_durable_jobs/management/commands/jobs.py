"""``manage.py jobs``: inspect and operate runs from a terminal.

Argument parsing and printing only: the verbs live in ``runs.py``, the trace in
``observe/trace.py``. Every expected failure (an unknown run, a run in the wrong status,
malformed JSON, a bad duration, tables not migrated) is one line on stderr and a non-zero exit.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import transaction

from ... import conf
from ...db.flow import holds
from ...db.migrated import needs_tables
from ...definitions.registry import all_jobs
from ...engine import clock
from ...engine.serialization import error_line
from ...exceptions import DurableJobsError
from ...models import FINISHED, JobRun, RunStatus
from ...observe import schedule_lines, stats, trace, trace_text, versions, wakes
from ...verbs import bulk, runs
from ...verbs.events import publish_event
from ...worker import presence
from .. import pauses as pause_cli
from . import _bulk as bulk_cli

RUN_HEADERS = ("run", "job", "status", "attempt", "queue", "created", "wakes", "error")
WORKER_HEADERS = ("worker", "status", "host", "pid", "queues", "started", "heartbeat", "runs")


def stats_lines(figures: stats.Stats) -> list[str]:
    estimated = set(figures.estimates)

    def pairs(counts: dict[str, int], path: str = "") -> str:
        return "  ".join(
            f"{key} {'~' if f'{path}.{key}' in estimated else ''}{n}" for key, n in counts.items()
        )

    age = figures.oldest_runnable_age_seconds
    lines = [
        f"runs            {pairs(figures.runs_by_status, 'runs_by_status')}",
        "oldest runnable "
        + ("none" if age is None else trace.short_duration(timedelta(seconds=age))),
        f"last minute     {pairs(figures.throughput['last_minute'])}",
        f"last hour       {pairs(figures.throughput['last_hour'])}",
        f"workers alive   {figures.workers_alive}",
    ]
    for pause in figures.pauses:
        lines.append(f"paused {pause['kind']} {pause['name']} since {pause['paused_at']}")
    for queue, depth in figures.queue_depth.items():
        lines.append(f"queue {queue}: {pairs(depth, f'queue_depth.{queue}')}")
    for job, d in figures.durations.items():
        took = "  ".join(
            f"p{p} {trace.short_duration(timedelta(seconds=d[f'p{p}']))}" for p in stats.PERCENTILES
        )
        lines.append(f"job {job}: {d['count']:g} succeeded in the last hour  {took}")
    for e in figures.top_errors:
        lines.append(f"error {e.error}: {e.runs} failed runs in the last day")
    if estimated:
        lines.append(f"~ an estimate: counts above {stats.EXACT_UP_TO:,} on PostgreSQL")
    return lines


def worker_cells(worker: dict[str, Any]) -> tuple[str, ...]:
    in_hand = ", ".join(f"{r['job_name']} {r['run_id'][:8]}" for r in worker["runs_in_hand"])
    return (
        worker["worker_id"],
        worker["status"],
        worker["host"],
        str(worker["pid"]),
        ",".join(worker["queues"]) or "*",
        trace.stamp(datetime.fromisoformat(worker["started_at"])),
        trace.stamp(datetime.fromisoformat(worker["last_heartbeat"])),
        f"{worker['executed']} done" + (f"; in hand: {in_hand}" if in_hand else ""),
    )


RUN_ID_HELP = "The run's id, or a unique prefix of it (at least 6 characters)."

#: Widest error cell of ``jobs list``; ``jobs show`` prints the whole error.
ERROR_WIDTH = 60


def error_cell(run: JobRun) -> str:
    """The run's error on one line: its code, or the class of the user's own exception,
    then the message (``ValueError: card declined``)."""
    text = error_line(run.error_type, " ".join(run.error.split()), code=run.error_code)
    return text if len(text) <= ERROR_WIDTH else text[: ERROR_WIDTH - 1] + "…"


class Command(BaseCommand):
    help = (
        "Inspect and operate runs: show, list, retry, cancel, wake, replay, publish, purge; "
        "pause and resume queues and jobs; list schedules and workers; print stats."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        sub = parser.add_subparsers(dest="action", metavar="ACTION", required=True)

        show = sub.add_parser("show", help="A run's trace: one line per step.")
        show.add_argument("run_id", metavar="RUN_ID", help=RUN_ID_HELP)
        show.add_argument("--json", action="store_true", help="Print the trace as JSON.")

        listing = sub.add_parser("list", help="The newest runs.")
        listing.add_argument(
            "--status", action="append", choices=RunStatus.values, help="Repeatable."
        )
        listing.add_argument("--job", metavar="JOB", help="Only runs of this job.")
        listing.add_argument("--limit", type=int, default=20, metavar="N", help="Default 20.")

        for verb in runs.VERBS.values():
            parser = sub.add_parser(verb.name, help=verb.help)
            if verb.name not in bulk.BULK_VERBS:
                parser.add_argument("run_id", metavar="RUN_ID", help=RUN_ID_HELP)
            elif verb.name == "replay":
                # RUN_ID STEP, or STEP alone with a filter.
                parser.add_argument(
                    "words",
                    nargs="+",
                    metavar="[RUN_ID] STEP",
                    help="The run (left out with a filter) and the name of the step to "
                    "execute again: it and the steps recorded after it execute anew, those "
                    "before it replay from storage.",
                )
                bulk_cli.add_filter_arguments(parser, verb.name)
            else:
                parser.add_argument("run_id", metavar="RUN_ID", nargs="?", help=RUN_ID_HELP)
                bulk_cli.add_filter_arguments(parser, verb.name)

        publish = sub.add_parser(
            "publish", help="Publish an event (wakes the runs waiting for it)."
        )
        publish.add_argument("event", metavar="EVENT", help='The event\'s name, e.g. "order.paid".')
        publish.add_argument(
            "--key",
            default=None,
            metavar="K",
            help="Its key: only the runs waiting for this key are woken. Default: none.",
        )
        publish.add_argument(
            "--payload",
            default=None,
            metavar="JSON",
            help="Its payload, as JSON. Default: none (null).",
        )

        schedules = sub.add_parser("schedules", help="Schedules with their next run times.")
        schedules.add_argument("--json", action="store_true", help="Print them as JSON.")

        known = sub.add_parser(
            "versions",
            help="Each job's versions: registered here or not, and their unfinished runs.",
        )
        known.add_argument("--json", action="store_true", help="Print them as JSON.")

        listed = sub.add_parser("workers", help="Live, stopped and lost worker processes.")
        listed.add_argument("--json", action="store_true", help="Print them as JSON.")

        figures = sub.add_parser("stats", help="Runs by status, queue depth, throughput, …")
        figures.add_argument("--json", action="store_true", help="Print them as JSON.")

        purge = sub.add_parser("purge", help="Delete finished runs and their steps.")
        purge.add_argument("--older-than", required=True, metavar="D", help='e.g. "30d".')
        purge.add_argument(
            "--status",
            action="append",
            choices=list(FINISHED),
            help="Repeatable. Default: every finished status (skipped too).",
        )
        purge.add_argument(
            "--batch-size",
            type=int,
            default=runs.PURGE_BATCH,
            metavar="N",
            help=f"Runs deleted per transaction (default {runs.PURGE_BATCH}).",
        )
        purge.add_argument(
            "--pause",
            type=float,
            default=runs.PURGE_PAUSE,
            metavar="S",
            help=f"Seconds between two batches (default {runs.PURGE_PAUSE}).",
        )
        pause_cli.add_parsers(sub)

    def handle(self, *args: Any, **options: Any) -> None:
        actions: dict[str, Callable[[dict[str, Any]], None]] = {
            "show": self.show,
            "list": self.list_runs,
            **dict.fromkeys(runs.VERBS, self.verb),
            "publish": self.publish,
            "purge": self.purge,
            "schedules": self.list_schedules,
            "workers": self.workers,
            "versions": self.versions,
            "stats": self.stats,
            **pause_cli.actions(self),
        }
        # needs_tables: before `migrate`, every action says to run it (NotMigrated), not
        # a traceback ending in "no such table".
        try:
            needs_tables(actions[options["action"]])(options)
        except (DurableJobsError, ValueError) as exc:
            raise CommandError(str(exc)) from None

    # -- reading ---------------------------------------------------------------------
    def show(self, options: dict[str, Any]) -> None:
        shown = trace.load(runs.get_run(options["run_id"]))
        reason = holds.held_reason(shown.run, shown.now)
        if options["json"]:
            data = {**trace_text.as_json(shown), "not_starting": reason or None}
            self.stdout.write(json.dumps(data, indent=2, ensure_ascii=False))
            return
        for line in trace_text.summary_lines(shown):
            self.stdout.write(line)
        if reason:
            self.stdout.write(f"not starting: {reason}")
        self.stdout.write("")
        if not shown.steps:
            self.stdout.write(trace_text.no_steps_line(shown.run))
            return
        table = trace_text.text_table(
            trace_text.STEP_HEADERS,
            [trace_text.step_cells(row) for row in shown.steps],
            paint=self.paint,
            status_column=2,
        )
        for line in table:
            self.stdout.write(line)
        for line in [*trace_text.children_lines(shown), *trace_text.unreached_lines(shown)]:
            self.stdout.write(line)

    def list_runs(self, options: dict[str, Any]) -> None:
        if options["limit"] < 1:
            raise CommandError("--limit must be at least 1")
        found = runs.recent_runs(
            statuses=options["status"], job=options["job"], limit=options["limit"]
        )
        if not found:
            # Not an error: runs of a job since removed may still be listed by name.
            job = options["job"]
            unknown = job is not None and job not in all_jobs()
            self.stdout.write(
                f"no runs; no job named {job} is registered" if unknown else "no runs"
            )
            return
        deadlines = wakes.wait_deadlines(found)
        rows = [self.run_cells(run, deadlines.get(run.pk)) for run in found]
        for line in trace_text.text_table(RUN_HEADERS, rows, paint=self.paint, status_column=2):
            self.stdout.write(line)

    @staticmethod
    def run_cells(run: JobRun, deadline: datetime | None = None) -> tuple[str, ...]:
        return (
            str(run.id),
            run.job_name,
            run.status,
            trace.attempts_text(run.attempt, trace.max_attempts(run.job_name, run.job_version)),
            run.queue,
            trace.stamp(run.created_at),
            trace_text.wakes_cell(run, deadline),
            error_cell(run),
        )

    def workers(self, options: dict[str, Any]) -> None:
        listed = presence.listing(now=clock.current().now())
        if options["json"]:
            self.stdout.write(json.dumps(listed, indent=2, ensure_ascii=False))
            return
        if not listed:
            self.stdout.write("no workers have registered")
            return
        for line in trace_text.text_table(
            WORKER_HEADERS, [worker_cells(w) for w in listed], paint=self.paint, status_column=1
        ):
            self.stdout.write(line)

    def versions(self, options: dict[str, Any]) -> None:
        listed = versions.listing(clock.current().now())
        if options["json"]:
            rows = [version.as_json() for version in listed]
            self.stdout.write(json.dumps(rows, indent=2, ensure_ascii=False))
            return
        if not listed:
            self.stdout.write("no jobs registered and no unfinished runs")
            return
        cells = [
            (
                v.job_name,
                str(v.version),
                "yes" if v.registered else "no",
                str(v.unfinished),
                ""
                if v.oldest_age_seconds is None
                else trace.short_duration(timedelta(seconds=v.oldest_age_seconds)),
            )
            for v in listed
        ]
        for line in trace_text.text_table(versions.HEADERS, cells):
            self.stdout.write(line)
        if stranded := [v for v in listed if v.unfinished and not v.registered]:
            self.stdout.write("")
            for v in stranded:
                self.stdout.write(
                    f"{v.job_name} version {v.version}: {v.unfinished} unfinished run(s) "
                    "this deploy cannot execute; keep @job(version=...) of it until they finish"
                )

    def stats(self, options: dict[str, Any]) -> None:
        figures = stats.collect(now=clock.current().now())
        if options["json"]:
            self.stdout.write(json.dumps(figures.as_json(), indent=2, ensure_ascii=False))
            return
        for line in stats_lines(figures):
            self.stdout.write(line)

    # -- operating -------------------------------------------------------------------
    def verb(self, options: dict[str, Any]) -> None:
        action = options["action"]
        if action in bulk.BULK_VERBS:
            chosen = bulk_cli.chosen(options)
            if chosen is not None:
                bulk_cli.act(self.stdout.write, action, chosen, options)
                return
        run_id = options["run_id"]
        if action == "replay":
            run = runs.replay_from(run_id, options["step"])
            done = f"replaying from step {options['step']!r}"
        else:
            run = {"retry": runs.retry, "cancel": runs.cancel, "wake": runs.wake}[action](run_id)
            done = {"retry": "retried", "cancel": "cancelled", "wake": "woken"}[action]
        if action == "cancel" and run.lease_owner:
            done += f" (its worker {run.lease_owner} stops it at its next step)"
        self.stdout.write(self.style.SUCCESS(f"run {run.id} {done}: now {run.status}"))

    def publish(self, options: dict[str, Any]) -> None:
        payload: Any = None
        if options["payload"] is not None:
            try:
                payload = json.loads(options["payload"])
            except json.JSONDecodeError as exc:
                raise CommandError(f"--payload is not valid JSON: {exc}") from None
        # The waiting runs are woken when this transaction commits.
        with transaction.atomic(using=conf.database()):
            event = publish_event(options["event"], payload, key=options["key"])
        key = f" key={event.key}" if event.key is not None else ""
        self.stdout.write(self.style.SUCCESS(f"published {event.name}{key} as event #{event.id}"))

    def purge(self, options: dict[str, Any]) -> None:
        if options["batch_size"] < 1:
            raise CommandError("--batch-size must be at least 1")
        # -v 2: a line a batch, on stderr (stdout keeps the count alone).
        told = self._purged_so_far if options["verbosity"] >= 2 else None
        count = runs.purge(
            options["older_than"],
            options["status"] or FINISHED,
            batch_size=options["batch_size"],
            pause=max(options["pause"], 0.0),
            progress=told,
        )
        self.stdout.write(f"deleted {count} run{'s' * (count != 1)} and their steps")

    def _purged_so_far(self, total: int) -> None:
        self.stderr.write(f"deleted {total} run{'s' * (total != 1)} so far")

    def list_schedules(self, options: dict[str, Any]) -> None:
        listed = schedule_lines.listing(clock.current().now())
        if options["json"]:
            self.stdout.write(json.dumps(listed, indent=2, ensure_ascii=False))
        elif not listed:
            self.stdout.write("no schedules")
        else:
            for line in trace_text.text_table(
                schedule_lines.HEADERS, [schedule_lines.cells(row) for row in listed]
            ):
                self.stdout.write(line)

    # -- output ----------------------------------------------------------------------
    def paint(self, status: str, text: str) -> str:
        """Colour a status cell (``self.style`` is plain when stdout is not a terminal)."""
        styles = {
            "completed": self.style.SUCCESS,
            "succeeded": self.style.SUCCESS,
            "failed": self.style.ERROR,
            "cancelled": self.style.NOTICE,
            "sleeping": self.style.WARNING,
            "waiting": self.style.WARNING,
            "running": self.style.HTTP_INFO,
            "live": self.style.SUCCESS,
            "lost": self.style.ERROR,
        }
        style = styles.get(status)
        return style(text) if style is not None else text
