"""Jobs of ``benchmarks/fanout.py``: one fan-out of N children beside N sequential
``invoke`` steps. Each parent records the time right before and right after its
children (two ``time.time`` steps), so the figure is step start -> parent resumed."""

from __future__ import annotations

import time
from typing import Any

from django_durable_jobs import job


@job(name="bench.fan.child")
def child(ctx: Any, i: int) -> int:
    return i


@job(name="bench.fan.all")
def fan_all(ctx: Any, n: int) -> dict[str, float]:
    t0 = ctx.step.run("t0", time.time)
    ctx.step.invoke_all("children", [child.call(i) for i in range(n)])
    return {"t0": t0, "t1": ctx.step.run("t1", time.time)}


@job(name="bench.fan.sequential")
def fan_sequential(ctx: Any, n: int) -> dict[str, float]:
    t0 = ctx.step.run("t0", time.time)
    for i in range(n):
        ctx.step.invoke(f"child-{i}", child, i)
    return {"t0": t0, "t1": ctx.step.run("t1", time.time)}
