"""Jobs for the edge-input tests (tests/integration/test_edge_inputs.py): overflowing durations,
unstorable outputs and names. Imported by those tests, which drive them in-process."""

from __future__ import annotations

from typing import Any

from django_durable_jobs import job


def nested(depth: int) -> Any:
    """``depth`` levels of lists around a 1: ``nested(2) == [[1]]``."""
    value: Any = 1
    for _ in range(depth):
        value = [value]
    return value


@job(name="tests.inputs.long_sleep", retries=3)
def long_sleep(ctx: Any) -> None:
    ctx.step.sleep("3000000d")


@job(name="tests.inputs.long_wait", retries=3)
def long_wait(ctx: Any) -> None:
    ctx.step.wait_for_event("wait", "never", timeout="3000000d")


@job(name="tests.inputs.long_invoke", retries=3)
def long_invoke(ctx: Any) -> None:
    ctx.step.invoke("call", "tests.noop", timeout="3000000d")


@job(name="tests.inputs.output", retries=3)
def output(ctx: Any, kind: str) -> Any:
    values = {"surrogate": "a\ud800b", "key-surrogate": {"\udfff": 1}, "deep": nested(5000)}
    return ctx.step.run("make", lambda: values[kind])


@job(name="tests.inputs.returns", retries=3)
def returns(ctx: Any, kind: str) -> Any:
    return {"surrogate": "\udfff", "deep": nested(5000)}[kind]


@job(name="tests.inputs.echo", retries=0)
def echo(ctx: Any, value: Any) -> Any:
    return ctx.step.run("echo", lambda: value)


@job(name="tests.inputs.bad_name", retries=3)
def bad_name(ctx: Any, where: str) -> None:
    if where == "step":
        ctx.step.run("load\x00user", lambda: 1)
    elif where == "match":
        ctx.step.wait_for_event("wait", "order.paid", match="4\x002")
    elif where == "event":
        ctx.step.wait_for_event("wait", "order\x00paid")
    else:
        ctx.step.publish("announce", "order.paid", key="k\x00")


@job(name="tests.inputs.grandparent", retries=0)
def grandparent(ctx: Any, value: int) -> Any:
    """Three generations for cancelling a whole family
    (tests/integration/verbs/test_children.py)."""
    return ctx.step.invoke("call-parent", "tests.parent", value, timeout="1h")
