"""``manage.py demo``: the onboarding flow end to end, with a real ``runjobs`` worker.

A customer signs up, the welcome email goes out, the run sleeps (``DEMO_SLEEP``),
waits for ``order.paid``; an order saved as paid publishes that event through
``publish_on(post_save, ...)``; the run resumes, invokes ``shop.receipt`` (whose
first attempt fails on purpose, to show a retry) and finishes. Then the trace.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management import call_command, get_commands
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import connection, transaction

from django_durable_jobs.models import JobRun, RunStatus

from ...jobs import onboarding
from ...models import Customer, Order

MANAGE_PY = Path(__file__).resolve().parents[4] / "manage.py"


class Command(BaseCommand):
    help = "Run the example's onboarding flow end to end with a real runjobs worker."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--timeout",
            type=float,
            default=90.0,
            help="Give up after this many seconds per stage (default 90).",
        )
        parser.add_argument(
            "--no-flaky",
            action="store_true",
            help="Do not fail the first attempt to send the receipt.",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        self.timeout = float(options["timeout"])
        self.seen = ""
        self.say(
            "== django-durable-jobs demo: onboarding a customer, end to end ==\n"
            f"database: {connection.vendor} ({connection.settings_dict['NAME']}), "
            f"look-around sleep: {getattr(settings, 'SHOP_LOOK_AROUND', '3d')}"
        )
        worker = DemoWorker(flaky=not options["no_flaky"], write=self.stdout.write)
        self.say(f"\n1. starting a worker: manage.py runjobs (pid {worker.proc.pid})")
        try:
            run = self.flow(worker)
        finally:
            code = worker.stop()
        self.say(f"\n6. worker stopped with SIGTERM (exit code {code}).")
        if code != 0:
            raise CommandError(f"the worker exited with {code}")
        self.say(f"   Run `make demo` again for another customer (run {run.id} is kept).")

    def flow(self, worker: DemoWorker) -> JobRun:
        token = uuid.uuid4().hex[:6]
        with transaction.atomic():  # the run is written with the customer, or not at all
            customer = Customer.objects.create(
                name="Ada Lovelace", email=f"ada+{token}@example.com"
            )
            run = onboarding.enqueue(customer.pk)
        self.say(f"\n2. {customer} signs up: onboarding run {run.id} enqueued")
        self.follow(run, worker, until={RunStatus.WAITING})
        order = Order.objects.create(customer=customer, total="42.00")
        order.status = Order.Status.PAID
        order.save()  # post_save -> publish_on -> "order.paid", key = the customer's id
        self.say(
            f"\n3. order #{order.pk} saved as paid: publish_on(post_save) published "
            f'order.paid with key "{customer.pk}"'
        )
        started = time.monotonic()
        self.follow(run, worker, until={RunStatus.SUCCEEDED})
        self.say(
            f"   {time.monotonic() - started:.1f}s after the order: result {json.dumps(run.result)}"
        )
        self.show_trace(run)
        self.say(
            "\n5. look around in the admin: `make run SUPERUSER=1` starts a worker and "
            "runserver\n   (log in as admin / admin), then open\n"
            f"   http://127.0.0.1:8000/admin/django_durable_jobs/jobrun/{run.id}/change/\n"
            "   http://127.0.0.1:8000/admin/shop/order/  (the action 'Mark as paid' "
            "publishes order.paid)"
        )
        return run

    def follow(self, run: JobRun, worker: DemoWorker, *, until: set[str]) -> None:
        """Print the run's status as it changes until it reaches one of ``until``."""
        deadline = time.monotonic() + self.timeout
        while True:
            run.refresh_from_db()
            if run.status != self.seen:
                self.seen = run.status
                self.say(f"   run: {describe(run)}")
            if run.status in until:
                return
            if run.status in (RunStatus.FAILED, RunStatus.CANCELLED):
                self.show_trace(run)
                raise CommandError(f"run {run.id} {run.status}: {run.error_code} {run.error}")
            if not worker.alive():
                raise CommandError("the worker exited unexpectedly (see its output above)")
            if time.monotonic() > deadline:
                raise CommandError(f"run {run.id} is still {run.status} after {self.timeout}s")
            time.sleep(0.05)

    def show_trace(self, run: JobRun) -> None:
        runs = [run, *JobRun.objects.filter(parent=run).order_by("created_at")]
        for number, shown in enumerate(runs):
            label = "4. the trace" if number == 0 else f"   its child run ({shown.job_name})"
            self.say(f"\n{label}: manage.py jobs show {shown.id}")
            if "jobs" in get_commands():
                call_command("jobs", "show", str(shown.id), stdout=self.stdout)
            else:  # before the `jobs` command exists
                print_steps(shown, self.stdout.write)

    def say(self, text: str) -> None:
        self.stdout.write(text)
        self.stdout.flush()


def describe(run: JobRun) -> str:
    step = run.steps.exclude(status="completed").order_by("-id").first()
    if run.status == RunStatus.SLEEPING and step is not None:
        return f'sleeping until {run.wake_at:%H:%M:%S} (step "{step.name}")'
    if run.status == RunStatus.WAITING and step is not None and step.event:
        return f'waiting for {step.event} with key "{step.correlation_key}" (step "{step.name}")'
    if run.status == RunStatus.WAITING and step is not None:
        return f'waiting for its child run (step "{step.name}")'
    if run.status == RunStatus.QUEUED and run.attempt:
        return f"queued for attempt {run.attempt + 1}: {run.error_type} {run.error}"
    return str(run.status)


def print_steps(run: JobRun, write: Callable[[str], Any]) -> None:
    write(f"   {run.job_name} {run.id}: {run.status}, attempt {run.attempt}")
    for step in run.steps.order_by("id"):
        took = ""
        if step.completed_at is not None:
            took = f"{(step.completed_at - step.started_at).total_seconds():7.2f}s"
        detail = step.error if step.status == "failed" else step.output
        write(f"   {step.name:<16} {step.status:<10} x{step.attempts} {took:>8}  {_short(detail)}")


def _short(value: object, limit: int = 60) -> str:
    text = "" if value is None else str(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


class DemoWorker:
    """``manage.py runjobs`` in a subprocess; its output is echoed with a prefix."""

    def __init__(self, *, flaky: bool, write: Callable[[str], Any]) -> None:
        env = {
            **os.environ,
            "PYTHONUNBUFFERED": "1",
            "DEMO_FLAKY": "1" if flaky else "0",
            # The worker logs each mail it sends; the full messages would drown the demo.
            "EMAIL_BACKEND": os.environ.get(
                "EMAIL_BACKEND", "django.core.mail.backends.locmem.EmailBackend"
            ),
        }
        self.write = write
        self.proc = subprocess.Popen(
            [sys.executable, str(MANAGE_PY), "runjobs", "--worker-id", "demo-worker"],
            cwd=MANAGE_PY.parent,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        assert self.proc.stdout is not None
        self.echo = threading.Thread(target=self._echo, args=(self.proc.stdout,), daemon=True)
        self.echo.start()

    def _echo(self, lines: Iterable[str]) -> None:
        for line in lines:
            self.write(f"   worker | {line.rstrip()}")

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self) -> int:
        if self.alive():
            self.proc.send_signal(signal.SIGTERM)
        try:
            code = self.proc.wait(timeout=40)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            code = self.proc.wait()
        self.echo.join(timeout=5)
        return code
