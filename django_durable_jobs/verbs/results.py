"""Waiting for a run's result: ``JobRun.wait`` and ``await run.await_result()``.

On PostgreSQL through psycopg 3 a waiting call is woken by the run's finish
(``db/postgresql/finished.py``: one LISTEN connection per process, shared by every
waiting call); elsewhere it reads the run again after 10 ms, then after twice as long
each time, at most every ``POLL_MOST`` (200 ms). Under ``InlineJobs`` (tests) a
waiting call first executes what is runnable, inline.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Callable
from typing import Any

from asgiref.sync import sync_to_async

from .. import conf
from ..db import dialect
from ..db.postgresql.finished import watch
from ..engine.durations import Duration, parse_duration
from ..exceptions import RunCancelled, RunFailed, RunNotFound
from ..models import JobRun, RunStatus

#: The first pause of a polling wait, and the longest.
POLL_FIRST = 0.01
POLL_MOST = 0.2
#: What a wait reads of its run (and updates on the instance).
FIELDS = ("status", "result", "error_code", "error", "error_type", "finished_at", "progress")

#: ``InlineJobs.drain`` while an ``InlineJobs`` is started (``use_inline``).
_inline: list[Callable[[], Any]] = []


def wait(run: JobRun, timeout: Duration | None = None) -> Any:
    """``JobRun.wait``: the run's result once it finished (see its docstring)."""
    deadline = _deadline(timeout)
    woken = threading.Event()
    unsubscribe = _subscribe(run, woken.set)
    try:
        pause = POLL_FIRST
        while True:
            woken.clear()
            if _inline:
                _inline[-1]()
            if _read(run):
                return outcome(run)
            left = _left(run, deadline, timeout)
            if unsubscribe is not None:
                woken.wait(left)
            else:
                time.sleep(pause if left is None else min(pause, left))
                pause = min(pause * 2, POLL_MOST)
    finally:
        if unsubscribe is not None:
            unsubscribe()


async def await_result(run: JobRun, timeout: Duration | None = None) -> Any:
    """``JobRun.await_result``: ``wait`` on the event loop, its reads in Django's
    thread for database work (as the async ORM); nothing blocks the loop meanwhile."""
    deadline = _deadline(timeout)
    loop = asyncio.get_running_loop()
    woken = asyncio.Event()

    def wake() -> None:  # from the listener's thread
        if not loop.is_closed():
            loop.call_soon_threadsafe(woken.set)

    unsubscribe = await asyncio.to_thread(_subscribe, run, wake)
    read = sync_to_async(_inline_then_read, thread_sensitive=True)
    try:
        pause = POLL_FIRST
        while True:
            woken.clear()
            if await read(run):
                return outcome(run)
            left = _left(run, deadline, timeout)
            if unsubscribe is not None:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(woken.wait(), left)
            else:
                await asyncio.sleep(pause if left is None else min(pause, left))
                pause = min(pause * 2, POLL_MOST)
    finally:
        if unsubscribe is not None:
            unsubscribe()


def outcome(run: JobRun) -> Any:
    """The result of a finished run, or its failure raised."""
    if run.status == RunStatus.SUCCEEDED:
        return run.result
    if run.status == RunStatus.FAILED:
        raise RunFailed(
            f"run {run.pk} ({run.job_name}) failed: {run.error_code or run.error_type}: "
            f"{run.error}",
            run_id=str(run.pk),
            error_code=run.error_code,
            error=run.error,
        )
    cancelled = RunCancelled(
        f"run {run.pk} ({run.job_name}) was {run.status}" + (f": {run.error}" if run.error else "")
    )
    cancelled.run_id = str(run.pk)  # type: ignore[attr-defined]
    cancelled.error_code = run.error_code  # type: ignore[attr-defined]
    cancelled.error = run.error  # type: ignore[attr-defined]
    raise cancelled


def use_inline(drain: Callable[[], Any]) -> Callable[[], None]:
    """While ``InlineJobs`` runs: waiting calls ``drain`` first, and a run that is not
    finished then will not finish while they wait (its fake clock stands still): they
    time out at once. Returns the function that undoes it."""
    _inline.append(drain)
    return lambda: _inline.remove(drain)


def _subscribe(run: JobRun, callback: Callable[[], None]) -> Callable[[], None] | None:
    using = conf.database()
    if _inline or not dialect.of(using).listens:
        return None
    return watch(using).subscribe(run.pk, callback)


def _read(run: JobRun) -> bool:
    """Read the run's ``FIELDS`` onto ``run``; whether it has finished."""
    row = JobRun.objects.using(conf.database()).filter(pk=run.pk).values(*FIELDS).first()
    if row is None:
        raise RunNotFound(f"no run has the id {run.pk} (purged?)")
    for name, value in row.items():
        setattr(run, name, value)
    return run.is_finished


def _inline_then_read(run: JobRun) -> bool:
    if _inline:
        _inline[-1]()
    return _read(run)


def _deadline(timeout: Duration | None) -> float | None:
    return None if timeout is None else time.monotonic() + parse_duration(timeout).total_seconds()


def _left(run: JobRun, deadline: float | None, timeout: Duration | None) -> float | None:
    """The seconds left to wait, or ``TimeoutError`` when none are (at once under
    ``InlineJobs``: nothing moves its clock while this waits)."""
    if deadline is None and not _inline:
        return None
    left = 0.0 if _inline else (deadline or 0.0) - time.monotonic()
    if left <= 0:
        waited = f"after {timeout}" if timeout is not None else "at once"
        raise TimeoutError(
            f"run {run.pk} ({run.job_name}) is still {run.status} {waited}"
            + (" (InlineJobs: it does not finish without the clock moving)" if _inline else "")
        )
    return left
