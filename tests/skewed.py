"""Run a command with this process's clock shifted: ``python tests/skewed.py SECONDS
-m django runjobs ...`` (or ``-c CODE``). Every wall-clock read of the app goes through
``SystemClock`` (STYLE: only it reads the clock), so shifting it is the process's skew.
"""

from __future__ import annotations

import runpy
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

# Run as a script, its own folder would come first: the repository's code must.
sys.path[0] = str(Path(__file__).resolve().parent.parent)

from django_durable_jobs import clock  # noqa: E402


def main() -> None:
    shift = timedelta(seconds=float(sys.argv[1]))

    def skewed_now(self: clock.SystemClock) -> datetime:
        return datetime.now(UTC) + shift

    clock.SystemClock.now = skewed_now  # type: ignore[method-assign]
    if sys.argv[2] == "-m":
        sys.argv = [sys.argv[3], *sys.argv[4:]]
        runpy.run_module(sys.argv[0], run_name="__main__", alter_sys=True)
    else:  # -c CODE
        exec(compile(sys.argv[3], "<skewed>", "exec"), {"__name__": "__main__"})


if __name__ == "__main__":
    main()
