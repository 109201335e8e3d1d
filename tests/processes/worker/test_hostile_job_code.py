"""Job code hostile to its worker, with real ``runjobs`` processes: job code that exits,
a supervisor killed alone, poison pills, a step that finishes after its run was
cancelled.

Same harness as tests/processes/worker/test_worker.py: short leases, waits that poll the
database until generous deadlines (they only keep a broken worker from hanging the
suite), worker output printed when a test fails.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time

import pytest

from django_durable_jobs.models import JobRun, RunStatus, StepRecord, StepStatus
from tests.processes.worker.test_worker import (  # noqa: F401 - `workers` is a fixture
    Workers,
    effects,
    status_of,
    wait_until,
    worker_pids,
    workers,
)
from tests.testapp import hostile_jobs, worker_jobs

pytestmark = [pytest.mark.subprocess, pytest.mark.django_db(transaction=True)]

FINISHED = {RunStatus.SUCCEEDED, RunStatus.FAILED}


# -- SystemExit, exit() and KeyboardInterrupt raised by job code ------------------


@pytest.mark.parametrize("concurrency", ["1", "2"])
def test_job_code_that_exits_fails_its_run_and_the_worker_keeps_serving(
    workers: Workers,  # noqa: F811 - the fixture imported above
    concurrency: str,
) -> None:
    worker = workers.start("exits", "--concurrency", concurrency)
    hows = ["sys.exit", "exit", "keyboard-interrupt", "step"]
    runs = {how: hostile_jobs.exits.enqueue(how) for how in hows}
    for how, run in runs.items():
        wait_until(
            lambda run=run: status_of(run) in FINISHED,  # type: ignore[misc]
            timeout=60,
            what=f"the {how} run to finish",
            workers=[worker],
        )
    after = worker_jobs.logged.enqueue(7)
    wait_until(
        lambda: status_of(after) in FINISHED,
        timeout=60,
        what="a run after them",
        workers=[worker],
    )
    assert worker.alive()
    expected = {
        "sys.exit": "builtins.SystemExit",
        "exit": "builtins.SystemExit",
        "keyboard-interrupt": "builtins.KeyboardInterrupt",
        "step": "builtins.SystemExit",
    }
    for how, run in runs.items():
        run.refresh_from_db()
        # Before: the worker process died with the job; the run sat "running" for a lease.
        assert (run.status, run.attempt, run.error_type) == (
            RunStatus.FAILED,
            1,
            expected[how],
        ), how
        assert run.error_type.split(".")[1] in run.traceback and "hostile_jobs.py" in run.traceback
        assert effects(run) == {f"exits-{how}": 1}
    assert runs["sys.exit"].error == "3"
    step = StepRecord.objects.get(run=runs["step"], name="quit")
    assert (step.status, step.error_type, step.error) == (
        StepStatus.FAILED,
        "builtins.SystemExit",
        "4",
    )
    assert JobRun.objects.get(pk=after.pk).status == RunStatus.SUCCEEDED
    assert worker.terminate() == 0  # exits 0 when asked to, and only then
    assert "crashed" not in worker.log() and "exited with" not in worker.log()


@pytest.mark.parametrize("concurrency", ["1", "2"])
def test_the_operators_ctrl_c_still_stops_the_worker(
    workers: Workers,  # noqa: F811 - the fixture imported above
    concurrency: str,
) -> None:
    worker = workers.start("ctrl-c", "--concurrency", concurrency, "--drain-timeout", "20s")
    workers.wait_started(worker, processes=int(concurrency))
    run = hostile_jobs.nap.enqueue(2)
    wait_until(
        lambda: effects(run)["napping"] >= 1,
        timeout=60,
        what="the step to start",
        workers=[worker],
    )
    os.killpg(worker.proc.pid, signal.SIGINT)  # Ctrl-C reaches the whole process group
    assert worker.proc.wait(timeout=30) == 0
    run.refresh_from_db()
    assert (run.status, run.result) == (RunStatus.SUCCEEDED, 2.0)  # drained, not failed


# -- a supervisor killed alone ---------------------------------------------------


def _gone(pid: int) -> bool:
    """Exited (a zombie no one reaped counts: it runs nothing)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] in {"Z", "X"}
    except FileNotFoundError:
        return True
    except OSError:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        return False


#: docs/explanation/claims-and-leases.md says "within a second": a second, plus a margin
#: for a loaded machine.
ORPHANS_EXIT_WITHIN = 3.0


def test_children_of_a_killed_supervisor_give_their_runs_back_and_exit(
    workers: Workers,  # noqa: F811 - the fixture imported above
) -> None:
    supervisor = workers.start("sup", "--concurrency", "2")
    workers.wait_started(supervisor, processes=2)
    children = worker_pids([supervisor]) - {supervisor.pid}
    assert len(children) == 2, supervisor.log()
    run = hostile_jobs.nap.enqueue(60)
    wait_until(
        lambda: effects(run)["napping"] >= 1,
        timeout=60,
        what="a child to start the step",
        workers=[supervisor],
    )
    killed_at = time.monotonic()
    os.kill(supervisor.pid, signal.SIGKILL)  # the supervisor alone, not its group
    assert supervisor.proc.wait(timeout=30) == -signal.SIGKILL
    # Before: both children went on claiming runs, as orphans, for as long as they lived.
    try:
        wait_until(
            lambda: all(_gone(pid) for pid in children),
            timeout=30,
            what="the orphaned children to exit",
        )
    finally:
        for pid in children:  # the fixture cannot reach them once their supervisor is gone
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    gone_after = time.monotonic() - killed_at
    print(f"\n[orphans] children gone {gone_after:.2f}s after the supervisor")
    # The docs promise about a second (PR_SET_PDEATHSIG, or the check every second).
    assert gone_after <= ORPHANS_EXIT_WITHIN, f"the children exited {gone_after:.2f}s after"
    run.refresh_from_db()
    # Given back as claimed: runnable again at once, no attempt used.
    assert (run.status, run.attempt, run.lease_owner) == (RunStatus.QUEUED, 0, "")
    assert "supervisor is gone" in supervisor.log()


# -- poison pills ---------------------------------------------------------------


@pytest.mark.parametrize("how", ["os._exit", "segfault"])
def test_a_step_that_kills_its_worker_is_named_when_attempts_run_out(
    workers: Workers,  # noqa: F811 - the fixture imported above
    how: str,
) -> None:
    # A supervisor replaces each child the poison kills; retries=2: three attempts.
    supervisor = workers.start("sup", "--concurrency", "2")
    run = hostile_jobs.poison.enqueue(how)
    wait_until(
        lambda: status_of(run) in FINISHED,
        timeout=120,
        what="the poisoned run to run out of attempts",
        workers=[supervisor],
    )
    run.refresh_from_db()
    assert run.status == RunStatus.FAILED and run.error_code == "X_ATTEMPTS_EXHAUSTED"
    # Before: "... its workers stopped renewing the lease", no step, and attempt "4 / 3".
    assert "while it executed step 'swallow-poison'" in run.error, run.error
    assert run.attempt == 3
    assert effects(run) == {"before": 1, "poison": 3}
    steps = {step.name: step for step in StepRecord.objects.filter(run=run)}
    assert (steps["before"].status, steps["before"].attempts) == (StepStatus.COMPLETED, 1)
    lost = steps["swallow-poison"]
    # Its start is recorded from the first retry on (the first attempt writes once per step).
    assert (lost.status, lost.error_type, lost.attempts) == (
        StepStatus.FAILED,
        "django_durable_jobs.StepLost",
        2,
    )
    assert "worker died inside it" in lost.error
    assert supervisor.terminate() == 0


# -- a run cancelled while a step executes --------------------------------------------


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_a_step_that_completes_after_its_run_was_cancelled_is_replayed_by_a_retry(
    workers: Workers,  # noqa: F811 - the fixture imported above
    kind: str,
) -> None:
    """An operator cancels a run while its step works: the step finishes (a sync step
    cannot be stopped halfway), and its record was refused, so a retry ran the step's
    side effect a second time. It is recorded now, and the retry replays it. The async
    job's sync step function runs on a step thread of the async lane."""
    from django_durable_jobs.verbs import runs

    worker = workers.start("canceller")
    workers.wait_started(worker)
    job = worker_jobs.sleeper if kind == "sync" else worker_jobs.async_sleeper
    run = job.enqueue(2.0)
    wait_until(
        lambda: effects(run)["sleeper-started"], timeout=30, what="the step", workers=[worker]
    )
    runs.cancel(run.pk)
    wait_until(
        lambda: effects(run)["sleeper-done"] and not JobRun.objects.get(pk=run.pk).lease_owner,
        timeout=30,
        what="the step to end and the worker to let the run go",
        workers=[worker],
    )
    run.refresh_from_db()
    assert (run.status, run.error_code) == (RunStatus.CANCELLED, "X_RUN_CANCELLED")
    assert StepRecord.objects.get(run=run, name="sleep").status == StepStatus.COMPLETED
    runs.retry(run.pk)
    wait_until(lambda: status_of(run) in FINISHED, timeout=30, what="the retry", workers=[worker])
    assert status_of(run) == RunStatus.SUCCEEDED
    assert effects(run) == {"sleeper-started": 1, "sleeper-done": 1}
    assert worker.terminate() == 0
