"""Three real ``runjobs`` processes against ``cron="* * * * *"``: exactly one run per
minute slot. The workers' clock runs 15 times faster than real time (a test-only
clock, tests/testapp/clocks.py), so six minute slots pass in about 25 seconds."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from django_durable_jobs.models import JobRun, RunStatus, Schedule
from django_durable_jobs.verbs.schedules import reschedule
from tests.processes.worker.test_worker import Workers, wait_until, workers

pytestmark = [pytest.mark.subprocess, pytest.mark.django_db(transaction=True)]
__all__ = ["workers"]  # the fixture, imported for pytest

START = datetime(2026, 6, 1, 9, 59, 50, tzinfo=UTC)
SPEED = 15.0
FAST_LEASE = {"DURABLE_JOBS_TEST_LEASE": "300s", "DURABLE_JOBS_TEST_HEARTBEAT": "0.5s"}
SLOTS = [START + timedelta(seconds=10, minutes=n) for n in range(6)]  # 10:00 ... 10:05


def test_three_workers_start_exactly_one_run_per_minute_slot(
    workers: Workers, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # The test's own: make test runs this test on PostgreSQL and MariaDB at once, and a
    # go file both shared started one's clock at the other's signal, while its workers
    # were still syncing their schedules (its 10:00 slot was then skipped).
    go_file = tmp_path / "schedule-clock-go"
    monkeypatch.setenv("DURABLE_JOBS_TEST_CLOCK", f"{START.isoformat()}|{SPEED}|{go_file}")
    # And a schedule declared in code, which the three sync at once as they start.
    monkeypatch.setenv("DURABLE_JOBS_TEST_CRON", "*/2 * * * *")
    schedule = Schedule(job_name="tests.slot", cron="* * * * *", timezone="UTC")
    reschedule(schedule, START).save()
    # Leases are measured on the fast clock: 300 fast seconds are 20 real ones.
    monkeypatch.setattr(workers, "env", lambda: {**Workers.env(workers), **FAST_LEASE})
    started = [workers.start(f"cron-{n}") for n in range(3)]
    for worker in started:
        workers.wait_started(worker, timeout=60)
    go_file.write_text(repr(time.time()))  # the fast clock starts now, for all three

    def finished_slots() -> bool:
        done = JobRun.objects.filter(schedule=schedule, status=RunStatus.SUCCEEDED)
        return done.filter(scheduled_at__in=SLOTS).count() == len(SLOTS)

    wait_until(finished_slots, timeout=120, what="six slots to run", workers=started)
    for worker in started:
        assert worker.terminate() == 0
    runs = list(JobRun.objects.filter(schedule=schedule).order_by("scheduled_at"))
    slots = [run.scheduled_at for run in runs]
    # Every minute from 10:00 on exactly once: no slot doubled, none skipped.
    assert len(runs) >= len(SLOTS)
    assert slots == [SLOTS[0] + timedelta(minutes=n) for n in range(len(runs))]
    for run in runs[: len(SLOTS)]:  # ctx.scheduled_at is the slot's time
        assert run.scheduled_at is not None and run.result == run.scheduled_at.isoformat()
    (in_code,) = Schedule.objects.filter(job_name="tests.slot_in_code")  # one row, not three
    even = [run.scheduled_at for run in JobRun.objects.filter(schedule=in_code)]
    assert len(even) == len(set(even)) >= 3  # 10:00, 10:02, 10:04: each once
