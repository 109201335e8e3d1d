"""The database's clock (``dbclock.DatabaseClock``): the offset it measures and uses.

The processes whose clocks are wrong are in ``test_clock_skew.py``; here one process's
clock is shifted with time-machine and compared with the database's own answer.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
import time_machine

from django_durable_jobs.db.dbclock import DatabaseClock, measure_offset
from django_durable_jobs.engine import clock

pytestmark = pytest.mark.django_db


def database_now() -> datetime:
    offset, _ = measure_offset("default")
    return datetime.now(UTC) + offset


def test_the_app_installs_the_databases_clock() -> None:
    assert isinstance(clock.current(), DatabaseClock)


def test_on_one_machine_the_offset_is_zero() -> None:
    db_clock = DatabaseClock()
    before = datetime.now(UTC)
    now = db_clock.now()
    assert db_clock.offset == timedelta(0)  # within the measurement's uncertainty
    assert before <= now <= datetime.now(UTC)


@pytest.mark.parametrize("skew", [120, -120])
def test_a_process_whose_clock_is_off_tells_the_databases_time(skew: int) -> None:
    real = datetime.now(UTC)
    with time_machine.travel(real + timedelta(seconds=skew), tick=True):
        db_clock = DatabaseClock()
        told = db_clock.now()
        assert abs(told - database_now()) < timedelta(seconds=1)
        assert abs(db_clock.offset + timedelta(seconds=skew)) < timedelta(seconds=1)
        assert abs(datetime.now(UTC) - told - timedelta(seconds=skew)) < timedelta(seconds=1)


def test_the_offset_is_measured_again_when_due() -> None:
    db_clock = DatabaseClock(every=0)  # due at every reading
    real = datetime.now(UTC)
    db_clock.now()
    assert db_clock.offset == timedelta(0)
    with time_machine.travel(real + timedelta(minutes=5), tick=True):
        db_clock.now()  # the clock was stepped: the next reading measures again
        assert abs(db_clock.offset + timedelta(minutes=5)) < timedelta(seconds=1)
