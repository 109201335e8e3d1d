"""Jobs for the events issue: on_event, step.publish and step.invoke."""

from __future__ import annotations

from typing import Any

from django_durable_jobs import job

from .jobs import FAIL_ONCE, effect


@job(name="tests.on_signup", on_event="user.signed_up")
def on_signup(ctx: Any, payload: Any) -> Any:
    ctx.step.run("greet", effect, f"greet-{payload['user']}", ctx.run_id)
    return payload


@job(name="tests.publisher", retries=2, backoff=0)
def publisher(ctx: Any, user: int) -> int:
    position = ctx.step.publish("announce", "user.signed_up", {"user": user}, key=str(user))
    ctx.step.run("after", effect, "after-publish", ctx.run_id)
    return int(position)


@job(name="tests.child", retries=0)
def child(ctx: Any, value: int) -> int:
    if "child" in FAIL_ONCE:
        raise ValueError(f"child refuses {value}")
    return value * 10


@job(name="tests.parent", retries=1, backoff=0)
def parent(ctx: Any, value: int) -> dict[str, Any]:
    result = ctx.step.invoke("call-child", "tests.child", value, timeout="1h")
    ctx.step.run("after", effect, "after-child", ctx.run_id)
    return {"child": result}


@job(name="tests.waiter")
def waiter(ctx: Any, key: str) -> Any:
    return ctx.step.wait_for_event("wait", "keyed", match=key, timeout="1h")


@job(name="tests.any_key_waiter")
def any_key_waiter(ctx: Any) -> Any:
    return ctx.step.wait_for_event("wait", "keyed", timeout="1h")
