"""``manage.py runjobs``: argument parsing only; the loop lives in ``worker/loop.py``."""

from __future__ import annotations

import contextlib
import logging
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from ... import conf
from ...db import faults
from ...engine.durations import parse_duration
from ...engine.serialization import unstorable
from ...exceptions import InvalidDuration
from ...models import JobRun
from ...worker import collector
from ...worker.loop import WorkerOptions
from ...worker.startup import import_urlconf, log_jobs, refuse_unmigrated
from ...worker.supervisor import run_workers


class Command(BaseCommand):
    help = "Run durable jobs: claim runnable runs and execute them."
    #: Whether this process was started to run the worker (``run_from_argv``), not a
    #: ``call_command`` in someone's process: its garbage collector is then the
    #: worker's to tune (``worker/collector.py``).
    whole_process = False

    def run_from_argv(self, argv: list[str]) -> None:
        self.whole_process = True
        super().run_from_argv(argv)

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--queue",
            action="append",
            dest="queues",
            metavar="Q",
            help="Serve this queue (repeatable). Default: every queue.",
        )
        parser.add_argument(
            "--concurrency",
            type=int,
            default=1,
            metavar="N",
            help="Worker processes (one sync run at a time each). Default 1.",
        )
        parser.add_argument(
            "--async-concurrency",
            type=int,
            default=None,
            metavar="M",
            help="Async runs (async def jobs) in flight at once per process. "
            "Default: DURABLE_JOBS['ASYNC_CONCURRENCY'] (100).",
        )
        parser.add_argument("--burst", action="store_true", help="Exit 0 once nothing is runnable.")
        parser.add_argument(
            "--max-runs",
            type=int,
            default=None,
            metavar="N",
            help="Exit after executing N runs (per process).",
        )
        parser.add_argument(
            "--poll-interval",
            default=None,
            metavar="DURATION",
            help='How often an idle worker looks for work, e.g. "1s". '
            "Default: DURABLE_JOBS['POLL_INTERVAL'].",
        )
        parser.add_argument(
            "--worker-id",
            default=None,
            metavar="ID",
            help="Name of this worker in leases and logs. Default host:pid.",
        )
        parser.add_argument(
            "--drain-timeout",
            default="30s",
            metavar="DURATION",
            help="On SIGTERM, how long the run in hand may take to finish before it is "
            'released. Default: "30s".',
        )

    def handle(self, *args: Any, **options: Any) -> None:
        if options["concurrency"] < 1:
            raise CommandError("--concurrency must be at least 1")
        if options["async_concurrency"] is not None and options["async_concurrency"] < 1:
            raise CommandError("--async-concurrency must be at least 1")
        if options["max_runs"] is not None and options["max_runs"] < 1:
            raise CommandError("--max-runs must be at least 1")
        try:
            poll = parse_duration(options["poll_interval"] or conf.get("POLL_INTERVAL"))
            drain = parse_duration(options["drain_timeout"])
        except InvalidDuration as exc:
            raise CommandError(str(exc)) from None
        if not poll:  # an idle worker would query the database in a busy loop
            raise CommandError(
                f"--poll-interval must be longer than zero, got {options['poll_interval']!r}"
            )
        if options["worker_id"] is not None:
            _check_worker_id(options["worker_id"])
        _configure_logging(int(options["verbosity"]))
        refuse_unmigrated()
        import_urlconf()
        log_jobs()
        try:
            faults.arm()  # a test's fault (tests/processes/test_faults.py); nothing otherwise
        except faults.FaultSpecError as exc:
            raise CommandError(str(exc)) from None
        values: dict[str, Any] = {
            "queues": options["queues"],
            "concurrency": options["concurrency"],
            "burst": options["burst"],
            "max_runs": options["max_runs"],
            "async_concurrency": options["async_concurrency"],
            "poll_interval": poll,
            "drain_timeout": drain,
        }
        if options["worker_id"] is not None:
            values["worker_id"] = options["worker_id"]
        # Start-up is done: what it left lives as long as the process, when the process
        # is the worker's (not a test's call_command, whose objects are the test's).
        with collector.tuned() if self.whole_process else contextlib.nullcontext():
            code = run_workers(WorkerOptions(**values))
        if code:
            raise SystemExit(code)


def _check_worker_id(worker_id: str) -> None:
    """Refuse at start what the lease column cannot hold, rather than fail every claim."""
    longest = JobRun._meta.get_field("lease_owner").max_length or 0
    if not worker_id or len(worker_id) > longest:
        raise CommandError(
            f"--worker-id must be 1 to {longest} characters, got {len(worker_id)}: {worker_id!r}"
        )
    if (why := unstorable(worker_id)) is not None:
        raise CommandError(f"--worker-id {worker_id!r} cannot be stored: {why}")


def _configure_logging(verbosity: int) -> None:
    """Show the worker's INFO lines unless the project configured this logger itself."""
    logger = logging.getLogger("django_durable_jobs")
    if logger.level == logging.NOTSET:
        logger.setLevel(logging.DEBUG if verbosity > 1 else logging.INFO)
    if not logger.handlers and not logging.getLogger().handlers:
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s %(message)s"))
        logger.addHandler(handler)
