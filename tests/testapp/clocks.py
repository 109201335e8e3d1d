"""A fast clock for worker processes in tests: ``DURABLE_JOBS_TEST_CLOCK`` makes the
clock of ``runjobs`` run ``speed`` times faster than real time, so several minute
slots of a schedule pass in seconds. Test-only; never in the shipped package."""

from __future__ import annotations

import contextlib
import os
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from django_durable_jobs.engine.clock import use


class ScaledClock:
    """Stands at ``start`` until ``go_file`` exists (written once every worker is up),
    then moves ``speed`` times faster than real time from the instant in that file."""

    def __init__(self, start: datetime, speed: float, go_file: Path) -> None:
        self.start, self.speed, self.go_file = start, speed, go_file
        self._epoch: float | None = None

    def now(self) -> datetime:
        if self._epoch is None:
            if not self.go_file.exists():
                return self.start
            self._epoch = float(self.go_file.read_text())
        elapsed = max(0.0, time.time() - self._epoch) * self.speed
        return self.start + timedelta(seconds=elapsed)


_installed = contextlib.ExitStack()


def install_from_environment() -> None:
    """``DURABLE_JOBS_TEST_CLOCK="<start ISO>|<speed>|<go file>"`` swaps the clock."""
    spec = os.environ.get("DURABLE_JOBS_TEST_CLOCK")
    if not spec:
        return
    start, speed, go_file = spec.split("|")
    clock = ScaledClock(datetime.fromisoformat(start).astimezone(UTC), float(speed), Path(go_file))
    _installed.enter_context(use(clock))
