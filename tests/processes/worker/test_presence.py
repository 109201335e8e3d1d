"""Worker rows written by real ``runjobs`` processes: they register,
heartbeat, show the run in hand, are marked lost after kill -9 and stopped after
SIGTERM. Same harness as test_worker_processes.py (lease 2s, heartbeat 0.5s)."""

from __future__ import annotations

import json
import signal
from io import StringIO
from typing import Any

import pytest
from django.core.management import call_command

from django_durable_jobs.models import Worker as WorkerRow
from django_durable_jobs.models import WorkerStatus
from tests.processes.worker.test_worker import Workers, effects, wait_until
from tests.processes.worker.test_worker import workers as workers  # the fixture
from tests.testapp import worker_jobs

pytestmark = [pytest.mark.subprocess, pytest.mark.django_db(transaction=True)]


def listed() -> dict[str, dict[str, Any]]:
    """``jobs workers --json``, by worker id."""
    out = StringIO()
    call_command("jobs", "workers", "--json", stdout=out)
    return {w["worker_id"]: w for w in json.loads(out.getvalue())}


def status(worker_id: str) -> str | None:
    return WorkerRow.objects.filter(worker_id=worker_id).values_list("status", flat=True).first()


def test_worker_registers_beats_and_is_lost_after_kill_9(workers: Workers) -> None:
    run = worker_jobs.slow_steps.enqueue(60)
    alpha = workers.start("alpha", "--queue", "default")
    wait_until(lambda: effects(run)["C-started"] >= 1, timeout=60, what="step C", workers=[alpha])
    shown = wait_until(
        lambda: listed().get("alpha", {}), timeout=30, what="alpha's row", workers=[alpha]
    )
    assert (shown["pid"], shown["queues"], shown["alive"]) == (alpha.pid, ["default"], True)
    assert shown["runs_in_hand"] == [{"run_id": str(run.id), "job_name": "tests.slow_steps"}]
    first_beat = shown["last_heartbeat"]
    wait_until(
        lambda: listed()["alpha"]["last_heartbeat"] > first_beat,
        timeout=30,
        what="alpha's heartbeat",
        workers=[alpha],
    )

    beta = workers.start("beta")  # a live worker sweeps: it marks alpha lost
    assert alpha.kill() == -signal.SIGKILL
    wait_until(lambda: status("alpha") == WorkerStatus.LOST, timeout=60, what="alpha lost")
    assert listed()["alpha"]["alive"] is False
    # beta took alpha's run over once its lease ran out, finished it, and counted it.
    wait_until(
        lambda: listed().get("beta", {}).get("executed", 0) >= 1,
        timeout=60,
        what="beta to count the run",
        workers=[beta],
    )
    assert listed()["beta"]["alive"] is True

    assert beta.terminate() == 0
    assert status("beta") == WorkerStatus.STOPPED
    assert listed()["beta"]["alive"] is False


def test_each_process_of_a_supervisor_registers(workers: Workers) -> None:
    sup = workers.start("sup", "--concurrency", "2")
    workers.wait_started(sup, processes=2)

    def children() -> list[dict[str, Any]]:
        rows = [w for w in listed().values() if w["worker_id"].startswith("sup/")]
        return rows if len(rows) == 2 else []

    rows = wait_until(
        children,
        timeout=30,
        what="two rows for sup's children",
        workers=[sup],
    )
    assert sorted(w["worker_id"].split(":")[0] for w in rows) == ["sup/0", "sup/1"]
    assert all(w["alive"] and w["pid"] != sup.pid for w in rows)
    assert sup.terminate() == 0
    assert {status(w["worker_id"]) for w in rows} == {WorkerStatus.STOPPED}
