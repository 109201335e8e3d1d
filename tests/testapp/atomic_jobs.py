"""Jobs whose steps are atomic (``ctx.step.atomic``): each writes ``Effect`` rows, which
the tests count. ``CALLS`` counts how often each step function was called, whether or
not its writes committed; ``FAIL`` makes a function raise after it wrote."""

from __future__ import annotations

from collections import Counter
from typing import Any

from django.db import connections, transaction

from django_durable_jobs import job

from .models import Effect

CALLS: Counter[str] = Counter()
#: name -> how many more calls of that step function raise after writing.
FAIL: Counter[str] = Counter()


def pay(name: str, run_id: str) -> str:
    CALLS[name] += 1
    Effect.objects.create(name=name, run_id=run_id)
    if FAIL[name] > 0:
        FAIL[name] -= 1
        raise ValueError(f"{name}: card declined")
    return f"paid:{name}"


def boom(name: str) -> None:
    CALLS[name] += 1
    if FAIL[name] > 0:
        FAIL[name] -= 1
        raise RuntimeError(f"{name} failed")


@job(name="tests.atomic.checkout", retries=2, backoff=0)
def checkout(ctx: Any) -> str:
    """An atomic step, then a step that may fail: a retry replays the atomic one."""
    paid = ctx.step.atomic("pay", pay, "pay", ctx.run_id)
    ctx.step.run("ship", boom, "ship")
    return str(paid)


@job(name="tests.atomic.acheckout", retries=2, backoff=0)
async def acheckout(ctx: Any) -> str:
    """``checkout`` as an ``async def`` job."""
    paid = await ctx.step.atomic("pay", pay, "apay", ctx.run_id)
    await ctx.step.run("ship", boom, "aship")
    return str(paid)


def write_elsewhere(run_id: str, catch: bool) -> str:
    CALLS["elsewhere"] += 1
    Effect.objects.create(name="here", run_id=run_id)
    try:
        with connections["other"].cursor() as cursor:
            cursor.execute("CREATE TABLE escaped (id integer)")
    except Exception:
        if not catch:
            raise
    return "done"


@job(name="tests.atomic.elsewhere", retries=0)
def elsewhere(ctx: Any, catch: bool = False) -> str:
    return str(ctx.step.atomic("write", write_elsewhere, ctx.run_id, catch))


def read_elsewhere(run_id: str) -> int:
    Effect.objects.create(name="read", run_id=run_id)
    with connections["other"].cursor() as cursor:
        cursor.execute("SELECT 41 + 1")
        (answer,) = cursor.fetchone()
    return int(answer)


@job(name="tests.atomic.reads_elsewhere", retries=0)
def reads_elsewhere(ctx: Any) -> int:
    return int(ctx.step.atomic("read", read_elsewhere, ctx.run_id))


def with_callbacks(run_id: str) -> bool:
    """Registers an ``on_commit`` callback, writes in a savepoint that rolls back, then
    writes outside it; returns whether a callback ran already (it must not have)."""
    transaction.on_commit(lambda: Effect.objects.create(name="after-commit", run_id=run_id))
    try:
        with transaction.atomic():
            Effect.objects.create(name="in-savepoint", run_id=run_id)
            raise ValueError("undo the savepoint only")
    except ValueError:
        pass
    Effect.objects.create(name="kept", run_id=run_id)
    return Effect.objects.filter(name="after-commit", run_id=run_id).exists()


@job(name="tests.atomic.callbacks", retries=0)
def callbacks(ctx: Any) -> bool:
    return bool(ctx.step.atomic("callbacks", with_callbacks, ctx.run_id))


async def an_async_function() -> None:
    return None


@job(name="tests.atomic.async_function", retries=0)
def async_function(ctx: Any) -> None:
    ctx.step.atomic("bad", an_async_function)
