"""The worker's start-up banner (``worker/startup.py``): each job's line says its flow
control and schedules in the words of docs/how-to/flow-control.md, not as reprs."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import pytest

from django_durable_jobs import CancelOn, Concurrency, Cron, Debounce, RateLimit, Throttle, job
from django_durable_jobs.definitions.registry import unregister
from django_durable_jobs.worker.startup import log_jobs


def region_of(region: str, order_id: int) -> str:
    return region.lower()


@pytest.fixture
def limited() -> Iterator[None]:
    @job(
        name="tests.banner_limited",
        retries=2,
        backoff="1s",
        priority=5,
        concurrency=Concurrency(1, key="region"),
        throttle=Throttle(10, per="1m", key=region_of),
        rate_limit=RateLimit(100, per="1h"),
        cancel_on=[CancelOn("order.cancelled", match="order_id")],
        on_failure="tests.banner_gated",
        cron=["0 9 * * *", Cron("30 18 * * 1-5", timezone="Europe/Paris")],
    )
    def banner_limited(ctx: Any, region: str = "eu", order_id: int = 0) -> None: ...

    @job(name="tests.banner_gated", concurrency=3, debounce=Debounce("5m", timeout="1h"))
    def banner_gated(ctx: Any, failure: Any = None) -> None: ...

    try:
        yield
    finally:
        unregister("tests.banner_limited")
        unregister("tests.banner_gated")


def test_each_jobs_flow_control_is_said_in_the_docs_words(
    limited: None, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, logger="django_durable_jobs.worker"):
        log_jobs()
    lines = {line.split()[1]: line for line in caplog.messages if line.startswith("  job ")}
    assert lines["tests.banner_limited"] == (
        "  job tests.banner_limited queue=default retries=2 backoff=1s priority=5, "
        "concurrency 1 per region, throttle 10/1m per region_of(), rate limit 100/1h, "
        "cancel on order.cancelled matching order_id, on failure tests.banner_gated, "
        'cron "0 9 * * *", cron "30 18 * * 1-5" in Europe/Paris'
    )
    assert lines["tests.banner_gated"].endswith(
        ", concurrency 3, debounce 5m, at most 1h after the first enqueue"
    )
    assert "Limit(" not in caplog.text
