"""The operator's verbs have one rule each (``runs.VERBS``): the run page offers a verb
exactly when the verb applies, and ``manage.py jobs`` and ``runs.<verb>`` accept exactly
the same runs. Proven on every status, with and without a worker's lease, due now and
scheduled for later; each side is exercised for real (the page rendered, the command
run, the guarded UPDATE made)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.test import Client
from django.urls import reverse

from django_durable_jobs.engine.clock import FakeClock
from django_durable_jobs.exceptions import RunStateError
from django_durable_jobs.models import JobRun, RunStatus
from django_durable_jobs.verbs import runs
from tests.factories import JobRunFactory, StepRecordFactory

#: How a run stands besides its status.
SHAPES = ("due", "later", "leased")


def make(status: str, shape: str, clock: FakeClock) -> JobRun:
    """A run in ``status`` shaped by ``shape``, with one recorded step (replay needs one)."""
    wake_at = clock.now() + (timedelta(hours=1) if shape == "later" else timedelta(0))
    run = JobRunFactory.create(
        status=status,
        wake_at=wake_at,
        lease_owner="worker-1" if shape == "leased" else "",
        lease_expires_at=clock.now() + timedelta(minutes=5) if shape == "leased" else None,
    )
    StepRecordFactory.create(run=run, name="first")
    return run


def offered(client: Client, run: JobRun, verb: str) -> bool:
    page = client.get(reverse("admin:django_durable_jobs_jobrun_change", args=[run.pk]))
    assert page.status_code == 200
    url = reverse(
        "admin:django_durable_jobs_jobrun_operate", kwargs={"object_id": run.pk, "verb": verb}
    )
    return url in page.content.decode()


def accepted(call: Callable[[], object], refused: type[Exception]) -> bool:
    try:
        call()
    except refused:
        return False
    return True


def cli(verb: str, run: JobRun) -> Callable[[], object]:
    extra = ("first",) if verb == "replay" else ()
    return lambda: call_command("jobs", verb, str(run.pk), *extra, stdout=StringIO())


def api(verb: str, run: JobRun) -> Callable[[], object]:
    if verb == "replay":
        return lambda: runs.replay_from(run.pk, "first")
    return lambda: {"retry": runs.retry, "cancel": runs.cancel, "wake": runs.wake}[verb](run.pk)


def test_every_verb_is_a_command_with_its_help(capsys: pytest.CaptureFixture[str]) -> None:
    assert set(runs.VERBS) == {"retry", "cancel", "wake", "replay"}
    with pytest.raises(SystemExit):
        call_command("jobs", "--help")
    listed = " ".join(capsys.readouterr().out.split())  # argparse wraps long lines
    for verb in runs.VERBS.values():
        assert f"{verb.name} {verb.help}" in listed


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("status", RunStatus.values)
def test_admin_cli_and_verb_agree(
    status: str, shape: str, admin_client: Client, clock: FakeClock
) -> None:
    for verb in runs.VERBS.values():
        rule = verb.allows(make(status, shape, clock), clock.now())
        assert offered(admin_client, make(status, shape, clock), verb.name) == rule, verb.name
        assert accepted(cli(verb.name, make(status, shape, clock)), CommandError) == rule
        assert accepted(api(verb.name, make(status, shape, clock)), RunStateError) == rule


@pytest.mark.parametrize(
    ("status", "shape", "verb", "expected"),
    [
        (RunStatus.QUEUED, "due", "wake", False),  # already runnable: nothing to wake
        (RunStatus.QUEUED, "later", "wake", True),  # scheduled for later
        (RunStatus.SLEEPING, "due", "wake", True),
        (RunStatus.RUNNING, "leased", "cancel", True),  # stops at its next step
        (RunStatus.CANCELLED, "leased", "retry", False),  # its worker has not let go yet
        (RunStatus.CANCELLED, "due", "retry", True),
        (RunStatus.FAILED, "due", "replay", True),
        (RunStatus.RUNNING, "leased", "replay", False),
        (RunStatus.SUCCEEDED, "due", "cancel", False),
    ],
)
def test_the_rules_say_what_the_docs_say(
    status: str, shape: str, verb: str, expected: bool, clock: FakeClock
) -> None:
    run = JobRun(  # read, not saved: the predicate needs no database
        status=status,
        wake_at=clock.now() + timedelta(hours=1 if shape == "later" else 0),
        lease_owner="worker-1" if shape == "leased" else "",
    )
    assert runs.VERBS[verb].allows(run, clock.now()) is expected


@pytest.mark.django_db
def test_waking_a_held_run_would_jump_its_limit(clock: FakeClock) -> None:
    """A run held for its concurrency slot is queued without a wake time: not woken."""
    held = JobRunFactory.create(status=RunStatus.QUEUED, wake_at=None)
    with pytest.raises(RunStateError, match="can be woken"):
        runs.wake(held.pk)
    held.refresh_from_db()
    assert held.wake_at is None
