"""Run a management command in a process whose wall clock is wrong, as on a machine
with a bad clock: ``python -m tests.skewed SECONDS COMMAND [ARGS...]``.

``time.time``, ``datetime.now`` and friends are shifted by SECONDS (time-machine
patches them where Python reads the clock, so every library sees the shift);
``time.monotonic`` and the database server's clock are not.
"""

from __future__ import annotations

import sys
from datetime import UTC, datetime, timedelta

import time_machine


def main(argv: list[str]) -> None:
    seconds = float(argv[1])
    time_machine.travel(datetime.now(UTC) + timedelta(seconds=seconds), tick=True).start()
    from django.core.management import execute_from_command_line

    execute_from_command_line([argv[0], *argv[2:]])


if __name__ == "__main__":
    main(sys.argv)
