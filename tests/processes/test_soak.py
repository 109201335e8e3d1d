"""The soak: mixed load (sleeps, waits with events, child runs, failures with
retries) on real workers that are SIGKILLed at random and replaced, for
``DURABLE_JOBS_SOAK_SECONDS`` (default 600). ``make soak`` runs it (marked ``soak``; never
in CI) and it prints runs, kills, repeated side effects, p99 latencies and worker RSS.
"""

from __future__ import annotations

import os
import random
import statistics
import time
from collections import Counter

import pytest
from django.db.models import Count

from django_durable_jobs.models import JobRun, RunStatus, StepRecord, StepStatus
from django_durable_jobs.verbs.events import publish_event
from tests.processes.worker.test_worker import Worker, Workers, wait_until, workers  # noqa: F401
from tests.testapp import fault_jobs
from tests.testapp.models import Effect

pytestmark = [pytest.mark.subprocess, pytest.mark.soak, pytest.mark.django_db(transaction=True)]

SECONDS = float(os.environ.get("DURABLE_JOBS_SOAK_SECONDS", "600"))
WORKERS = 3
PER_SECOND = 4  # runs enqueued per second (each also starts a child)


def _rss_kib(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as status:
            line = next(row for row in status if row.startswith("VmRSS:"))
        return int(line.split()[1])
    except (OSError, StopIteration):
        return 0


def _publish_waited(sent: set[str]) -> None:
    waiting = StepRecord.objects.filter(name="wait", status=StepStatus.WAITING)
    for run_id in waiting.values_list("run_id", flat=True):
        if str(run_id) not in sent:
            sent.add(str(run_id))
            publish_event("soak.ping", {"run": str(run_id)}, key=str(run_id))


def _p99(values: list[float]) -> float:
    return statistics.quantiles(values, n=100)[98] if len(values) >= 2 else 0.0


def test_soak(workers: Workers) -> None:  # noqa: F811
    rng = random.Random(11)
    pool = [workers.start(f"w{i}") for i in range(WORKERS)]
    sent: set[str] = set()
    kills, n = 0, 0
    began = time.monotonic()
    next_kill = began + rng.uniform(5, 15)
    while time.monotonic() - began < SECONDS:
        for _ in range(PER_SECOND):
            fault_jobs.mixed.enqueue(n)
            n += 1
        _publish_waited(sent)
        if time.monotonic() >= next_kill:
            victim = rng.randrange(len(pool))
            pool[victim].kill()
            kills += 1
            pool[victim] = workers.start(f"w{victim}-{kills}")
            next_kill = time.monotonic() + rng.uniform(5, 15)
        time.sleep(1)  # the load's pace, not a wait for a condition

    def drained() -> bool:
        _publish_waited(sent)
        done = {RunStatus.SUCCEEDED, RunStatus.FAILED, RunStatus.CANCELLED}
        return not JobRun.objects.exclude(status__in=done).exists()

    wait_until(drained, timeout=600, what="the soak's runs to finish", workers=pool)
    rss = max(_rss_kib(worker.pid) for worker in pool)
    statuses = dict(JobRun.objects.values_list("status").annotate(n=Count("id")))
    effects = Counter(Effect.objects.values_list("run_id", "name"))
    # "flaky" repeats by design (its first attempt fails); any other repeat is a kill's.
    repeated = sum(count - 1 for (_, name), count in effects.items() if name != "flaky")
    durations, starts = [], []
    completed_steps = StepRecord.objects.filter(status=StepStatus.COMPLETED, kind="run")
    for started, completed in completed_steps.values_list("started_at", "completed_at"):
        if completed is not None:
            durations.append((completed - started).total_seconds())
    for run_created, first_start in StepRecord.objects.filter(name="a").values_list(
        "run__created_at", "started_at"
    ):
        starts.append((first_start - run_created).total_seconds())
    print(
        f"\n[soak] {SECONDS:.0f}s: runs={sum(statuses.values())} statuses={statuses} "
        f"kills={kills} "
        f"side effects repeated by kills={repeated} "
        f"p99 step duration={_p99(durations) * 1000:.0f}ms "
        f"p99 enqueue-to-first-step={_p99(starts) * 1000:.0f}ms worker RSS max={rss // 1024}MiB"
    )
    # A kill interrupts at most one step, whose function then runs once more: never more
    # repeated side effects than kills. (A step record cannot count it: the killed
    # execution never wrote its record, so the one that did says attempt 1.)
    assert repeated <= kills, (repeated, kills)
    assert set(statuses) == {RunStatus.SUCCEEDED}, statuses
    for worker in pool:
        assert worker.terminate(timeout=60) == 0
