"""Job code hostile to its worker: cut connections, unstorable errors,
job code that exits, poison pills. Side effects are ``Effect`` rows."""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from typing import Any, NoReturn

from django.db import connection, connections

from django_durable_jobs import job

from .models import Effect


def _effect(name: str, run_id: str) -> str:
    Effect.objects.create(name=name, run_id=run_id)
    return name


def _kill_backend(pid: int) -> None:
    """From another connection (this thread's own), as an operator or a restart would."""
    try:
        with connections["default"].cursor() as cursor:
            if connections["default"].vendor == "postgresql":
                cursor.execute("SELECT pg_terminate_backend(%s)", [pid])
            else:
                cursor.execute(f"KILL {int(pid)}")
    finally:
        connections.close_all()


def _refuse_connections(seconds: float) -> None:
    """New connections are refused (nothing listens on the port) for ``seconds``, as
    during a database restart."""
    settings = connection.settings_dict
    port = settings["PORT"]
    settings["PORT"] = "1"
    threading.Timer(seconds, settings.__setitem__, ("PORT", port)).start()


@job(name="tests.cut_connection", retries=0)
def cut_connection(ctx: Any, refuse_for: float = 0) -> str:
    """Succeeds, but kills its worker's connection on the way out: the outcome write
    that follows meets a terminated backend (and, with ``refuse_for``, a database
    that refuses new connections for that long)."""
    ctx.step.run("work", _effect, "work", ctx.run_id)
    with connection.cursor() as cursor:
        pg = connection.vendor == "postgresql"
        cursor.execute("SELECT pg_backend_pid()" if pg else "SELECT CONNECTION_ID()")
        (pid,) = cursor.fetchone()
    killer = threading.Thread(target=_kill_backend, args=(pid,))
    killer.start()
    killer.join()
    if refuse_for:
        _refuse_connections(refuse_for)
    return "done"


#: The same under a concurrency limit: its outcome frees a slot, so it is written alone
#: (never fused with the next claim) and under the key's lock.
cut_connection_limited = job(name="tests.cut_connection_limited", retries=0, concurrency=1)(
    cut_connection.fn
)


def _raise(message: str) -> NoReturn:
    raise ValueError(message)


@job(name="tests.unstorable_error", retries=0)
def unstorable_error(ctx: Any, where: str) -> None:
    """Fails with a NUL and a lone surrogate in its message (and so its traceback)."""
    message = "bad \x00 byte and \ud800 half"
    if where == "step":
        ctx.step.run("explode", _raise, message)
    _raise(message)


@job(name="tests.exits", retries=0)
def exits(ctx: Any, how: str) -> str:
    """Job code that ends the process the way scripts do: sys.exit, exit(), Ctrl-C."""
    Effect.objects.create(name=f"exits-{how}", run_id=ctx.run_id)
    if how == "sys.exit":
        sys.exit(3)
    if how == "exit":
        exit()  # the builtin a script would call
    if how == "step":
        ctx.step.run("quit", sys.exit, 4)
    if how == "keyboard-interrupt":
        raise KeyboardInterrupt
    return how


def _sleep(run_id: str, seconds: float) -> float:
    Effect.objects.create(name="napping", run_id=run_id)
    time.sleep(seconds)
    return seconds


@job(name="tests.nap", retries=0)
def nap(ctx: Any, seconds: float) -> float:
    return float(ctx.step.run("nap", _sleep, ctx.run_id, seconds))


def _die(run_id: str, how: str) -> None:
    Effect.objects.create(name="poison", run_id=run_id)
    if how == "segfault":
        os.kill(os.getpid(), signal.SIGSEGV)
    os._exit(1)


@job(name="tests.poison", retries=2, backoff=0)
def poison(ctx: Any, how: str) -> str:
    ctx.step.run("before", _effect, "before", ctx.run_id)
    ctx.step.run("swallow-poison", _die, ctx.run_id, how)
    return "unreachable"


def _stop_me(run_id: str) -> None:
    """The worker is told to stop at once (SIGUSR2, as the supervisor's death is), then
    the step goes on as a slow step would."""
    Effect.objects.create(name="stopping", run_id=run_id)
    os.kill(os.getpid(), signal.SIGUSR2)
    time.sleep(5)


@job(name="tests.abandoned", retries=0)
def abandoned(ctx: Any) -> None:
    ctx.step.run("stop", _stop_me, ctx.run_id)
