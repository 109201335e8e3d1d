"""Zombies and supervisors, with real ``runjobs`` processes: a worker frozen
past its lease (SIGSTOP) while another takes over, then continued (SIGCONT); one child
of a supervisor killed alone.

The other supervisor cases live beside their harness: the supervisor killed alone
(tests/processes/worker/test_hostile_job_code.py::test_children_of_a_killed_supervisor_give_their_
runs_back_and_exit) and SIGTERM to the whole process group (tests/processes/worker/test_worker.py
::test_sigterm_to_the_whole_process_group_drains_once).
"""

from __future__ import annotations

import os
import signal

import pytest

from django_durable_jobs.models import JobRun, RunStatus, StepRecord
from tests.processes.worker.test_worker import (  # noqa: F401 - `workers` is a fixture
    Workers,
    effects,
    status_of,
    wait_until,
    workers,
)
from tests.testapp import worker_jobs
from tests.testapp.models import Execution

pytestmark = [pytest.mark.subprocess, pytest.mark.django_db(transaction=True)]


def test_a_zombie_worker_is_refused_and_carries_on_serving(workers: Workers) -> None:  # noqa: F811
    run = worker_jobs.slow_steps.enqueue(4)  # step C blocks 4 s on its first attempt
    zombie = workers.start("zombie")
    wait_until(lambda: effects(run)["C-started"] >= 1, timeout=60, what="step C", workers=[zombie])
    os.kill(zombie.pid, signal.SIGSTOP)  # heartbeat thread included: the lease runs out
    try:
        second = workers.start("second")
        wait_until(
            lambda: status_of(run) == RunStatus.SUCCEEDED,
            timeout=90,
            what="the second worker to take the run over and finish it",
            workers=[second],
        )
        assert second.terminate() == 0
    finally:
        os.kill(zombie.pid, signal.SIGCONT)
    # The zombie finishes step C's function, then every write it tries is refused.
    wait_until(
        lambda: "lease" in zombie.log() and "not recorded" in zombie.log(),
        timeout=60,
        what="the zombie's writes to be refused",
        workers=[zombie],
    )
    run.refresh_from_db()
    assert (run.status, run.result, run.attempt) == (RunStatus.SUCCEEDED, ["A", "B", 2], 2)
    assert dict(StepRecord.objects.filter(run=run).values_list("name", "attempts")) == {
        "A": 1,
        "B": 1,
        "C": 1,
    }
    # A and B replayed; C's side effect is at-least-once: both workers executed it.
    assert effects(run) == {"A": 1, "B": 1, "C-started": 2, "C-done": 2}

    after = worker_jobs.logged.enqueue(5)  # the zombie is the only worker left
    wait_until(
        lambda: status_of(after) == RunStatus.SUCCEEDED,
        timeout=60,
        what="the continued worker to serve a new run",
        workers=[zombie],
    )
    assert list(Execution.objects.filter(run_id=str(after.id)).values_list("pid", flat=True)) == [
        zombie.pid
    ]
    assert zombie.terminate() == 0


def test_a_child_killed_alone_is_replaced_and_its_run_taken_over(workers: Workers) -> None:  # noqa: F811
    supervisor = workers.start("sup", "--concurrency", "2")
    workers.wait_started(supervisor, processes=2)
    run = worker_jobs.slow_steps.enqueue(30)
    wait_until(
        lambda: effects(run)["C-started"] >= 1, timeout=60, what="step C", workers=[supervisor]
    )
    owner = JobRun.objects.values_list("lease_owner", flat=True).get(pk=run.pk)
    child = int(owner.split("#")[0].rsplit(":", 1)[1])  # "sup/<slot>:<pid>#<lease>"
    assert child != supervisor.pid
    os.kill(child, signal.SIGKILL)
    wait_until(
        lambda: status_of(run) == RunStatus.SUCCEEDED,
        timeout=90,
        what="the run to be taken over after its lease",
        workers=[supervisor],
    )
    run.refresh_from_db()
    assert (run.result, run.attempt) == (["A", "B", 2], 2)
    assert effects(run) == {"A": 1, "B": 1, "C-started": 2, "C-done": 1}
    assert f"(pid {child}) exited with -9; replacing it" in supervisor.log()
    workers.wait_started(supervisor, processes=3)  # the replacement logged its start
    assert supervisor.alive()
    assert supervisor.terminate() == 0
