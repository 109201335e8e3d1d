"""Processes whose clocks are wrong: the database's clock decides.

Real ``runjobs`` processes run with their wall clock shifted by two minutes
(``tests/skewed.py``) beside a worker with a correct clock. A process that trusted its
own clock would take over live leases (ahead), write leases that have already expired
and ignore new runs (behind), wake sleeping runs early or late, and, as an enqueuer or
a publisher, start or wake runs early (behind) or late (ahead). Every bound below is
about the poll interval plus a few seconds of margin (a loaded 2-core machine), far
under the two minutes of skew, so each test fails where a process's own clock decides.
"""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from django_durable_jobs.engine import clock
from django_durable_jobs.models import JobRun, RunStatus
from tests.processes.lifeline import die_with_test
from tests.processes.worker.test_worker import (
    POLL,
    REPO_DIR,
    Worker,
    Workers,
    effects,
    status_of,
    wait_until,
    workers,  # noqa: F401
)
from tests.testapp import flow_jobs, worker_jobs
from tests.testapp.event_jobs import waiter

pytestmark = [pytest.mark.subprocess, pytest.mark.django_db(transaction=True)]

SKEW = 120.0  # seconds
#: For the start-up of a process: far under the skew.
DEADLINE = 45.0
#: How late a due run may start or a woken one resume: the workers' poll interval,
#: plus a margin for a query, a step and a loaded machine.
LATE = float(POLL.removesuffix("s")) + 4.0
#: How early: the clocks' measured offsets are within a second.
EARLY = 1.0
NAP = 8  # seconds


def start_skewed(workers: Workers, name: str, seconds: float, *args: str) -> Worker:  # noqa: F811
    """``runjobs`` in a process whose clock is ``seconds`` off."""
    log_path = workers.log_path(name)
    log_file = log_path.open("wb")
    cmd = [sys.executable, "-m", "tests.skewed", str(seconds), "runjobs", "--worker-id", name]
    proc = subprocess.Popen(
        [*cmd, *args],
        cwd=REPO_DIR,
        env=workers.env(),
        stdin=subprocess.DEVNULL,
        stdout=log_file,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        preexec_fn=die_with_test,
    )
    worker = Worker(name, proc, log_path, log_file)
    workers.started.append(worker)
    workers.wait_started(worker)
    return worker


def skewed_command(workers: Workers, seconds: float, *args: str) -> str:  # noqa: F811
    """A management command in a process whose clock is ``seconds`` off; its output."""
    done = subprocess.run(
        [sys.executable, "-m", "tests.skewed", str(seconds), *args],
        cwd=REPO_DIR,
        env=workers.env(),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_a_worker_whose_clock_is_ahead_leaves_live_leases_alone(workers: Workers) -> None:  # noqa: F811
    on_time = workers.start("on-time")
    run = worker_jobs.sleeper.enqueue(10)
    wait_until(
        lambda: effects(run)["sleeper-started"] >= 1,
        timeout=60,
        what="the step to start",
        workers=[on_time],
    )
    ahead = start_skewed(workers, "ahead", SKEW)
    # The worker ahead has looked for expired leases while the run was held.
    assert status_of(run) == RunStatus.RUNNING
    wait_until(
        lambda: status_of(run) == RunStatus.SUCCEEDED,
        timeout=60,
        what="the run to finish",
        workers=[on_time, ahead],
    )
    run.refresh_from_db()
    assert effects(run) == {"sleeper-started": 1, "sleeper-done": 1}  # ran once
    assert run.attempt == 1
    assert "ahead of the database's" in ahead.log()


def test_a_worker_whose_clock_is_behind_takes_new_runs_and_holds_their_leases(
    workers: Workers,  # noqa: F811
) -> None:
    behind = start_skewed(workers, "behind", -SKEW)
    run = worker_jobs.sleeper.enqueue(6)
    wait_until(
        lambda: effects(run)["sleeper-started"] >= 1,
        timeout=LATE,
        what="the worker behind to take a new run",
        workers=[behind],
    )
    run.refresh_from_db()
    assert run.lease_expires_at is not None
    assert run.lease_expires_at > clock.current().now()  # not written already expired
    on_time = workers.start("on-time")  # reaps expired leases as soon as it starts
    workers.wait_started(on_time)
    wait_until(
        lambda: status_of(run) == RunStatus.SUCCEEDED,
        timeout=60,
        what="the run to finish",
        workers=[behind, on_time],
    )
    run.refresh_from_db()
    assert effects(run) == {"sleeper-started": 1, "sleeper-done": 1}
    assert run.attempt == 1


@pytest.mark.parametrize("writer_skew", [SKEW, -SKEW], ids=["ahead", "behind"])
def test_a_sleep_written_by_a_skewed_worker_ends_on_time(
    workers: Workers,  # noqa: F811
    writer_skew: float,
) -> None:
    # One worker starts the sleep, another resumes it: each must mean the same instant.
    writer = start_skewed(workers, "writer", writer_skew)
    run = worker_jobs.napper.enqueue(NAP)
    wait_until(
        lambda: status_of(run) == RunStatus.SLEEPING,
        timeout=LATE,
        what="the run to start its sleep",
        workers=[writer],
    )
    slept = time.monotonic()  # the sleep began a poll of wait_until before, at most
    assert writer.terminate() == 0
    assert status_of(run) == RunStatus.SLEEPING  # the writer did not resume it itself
    resumer = workers.start("resumer")
    workers.wait_started(resumer)
    ready = time.monotonic()
    wait_until(
        lambda: status_of(run) in {RunStatus.SUCCEEDED, RunStatus.FAILED},
        timeout=DEADLINE,
        what="the sleep to end and the run to finish",
        workers=[resumer],
    )
    took = time.monotonic() - slept
    run.refresh_from_db()
    assert run.status == RunStatus.SUCCEEDED, (run.error_code, run.error)
    assert effects(run) == {"nap-before": 1, "nap-after": 1}
    # Not early (a clock behind), and not late (a clock ahead) once the resumer is up.
    late = slept + took - max(slept + NAP, ready)
    assert took >= NAP - EARLY, f"the {NAP} s sleep ended after {took:.2f}s"
    assert late <= LATE, (
        f"the {NAP} s sleep ended {late:.2f}s late (resumer up after {ready - slept:.2f}s)"
    )


def skewed_shell(workers: Workers, seconds: float, code: str) -> list[str]:  # noqa: F811
    """Run ``code`` in ``manage.py shell`` in a process ``seconds`` off; its printed
    last line's words (log lines may come before it). ``time.monotonic()`` is the
    machine's, not shifted: the test compares it with its own."""
    return skewed_command(workers, seconds, "shell", "-c", code).strip().splitlines()[-1].split()


@pytest.mark.parametrize("enqueuer_skew", [SKEW, -SKEW], ids=["ahead", "behind"])
def test_a_run_enqueued_by_a_skewed_process_starts_when_due(
    workers: Workers,  # noqa: F811
    enqueuer_skew: float,
) -> None:
    """A run enqueued now starts at once (not two minutes later: ahead), one enqueued
    ``run_after`` NAP seconds starts then (not at once: behind; not late: ahead)."""
    on_time = workers.start("on-time")
    workers.wait_started(on_time)
    code = (
        "import time; from tests.testapp.worker_jobs import logged; t = time.monotonic(); "
        f"print(logged.enqueue(1).pk, logged.using(run_after='{NAP}s').enqueue(2).pk, t)"
    )
    now_id, later_id, sent = skewed_shell(workers, enqueuer_skew, code)
    now, later = JobRun(pk=now_id), JobRun(pk=later_id)
    wait_until(
        lambda: status_of(now) == RunStatus.SUCCEEDED,
        timeout=DEADLINE,
        what="the run enqueued for now to finish",
        workers=[on_time],
    )
    ran = time.monotonic() - float(sent)
    wait_until(
        lambda: status_of(later) != RunStatus.QUEUED,
        timeout=DEADLINE,
        what=f"the run enqueued for {NAP}s later to start",
        workers=[on_time],
    )
    started = time.monotonic() - float(sent)
    assert ran <= LATE, f"the run enqueued for now ran after {ran:.2f}s"
    assert NAP - EARLY <= started <= NAP + LATE, f"the {NAP} s delay ended after {started:.2f}s"
    wait_until(
        lambda: status_of(later) == RunStatus.SUCCEEDED,
        timeout=DEADLINE,
        what="the delayed run to finish",
        workers=[on_time],
    )


@pytest.mark.parametrize("publisher_skew", [SKEW, -SKEW], ids=["ahead", "behind"])
def test_an_event_published_by_a_skewed_process_wakes_and_cancels_at_once(
    workers: Workers,  # noqa: F811
    publisher_skew: float,
) -> None:
    on_time = workers.start("on-time")
    waiting = waiter.enqueue("k")
    wait_until(
        lambda: status_of(waiting) == RunStatus.WAITING,
        timeout=DEADLINE,
        what="the run to wait for its event",
        workers=[on_time],
    )
    dunning = flow_jobs.dunning.enqueue(7)  # cancel_on invoice.paid (its invoice_id)
    code = (
        "import time; from django_durable_jobs.verbs.events import publish_event; "
        "t = time.monotonic(); publish_event('keyed', {'n': 1}, key='k'); "
        "publish_event('invoice.paid', key='7'); print(t)"
    )
    (sent,) = skewed_shell(workers, publisher_skew, code)
    # A run enqueued a moment before is older than the event, whatever the publisher's
    # clock says: it is cancelled (not only runs older than the publisher's "now").
    assert status_of(dunning) == RunStatus.CANCELLED
    # Well inside the 30 s event poll: the publish woke it, and did not postpone it.
    wait_until(
        lambda: status_of(waiting) == RunStatus.SUCCEEDED,
        timeout=DEADLINE,
        what="the event published by a skewed process to wake the run",
        workers=[on_time],
    )
    woke = time.monotonic() - float(sent)
    waiting.refresh_from_db()
    assert waiting.result == {"n": 1}
    assert woke <= LATE, f"the run resumed {woke:.2f}s after the event was published"
