"""OpenTelemetry: a span per run execution and per ``step.run``, in the trace of the
code that enqueued the run, checked with the SDK's in-memory exporter."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from django_durable_jobs.models import JobRun
from tests.conftest import Driver
from tests.testapp import fanout_jobs, jobs
from tests.testapp.event_jobs import parent

pytestmark = pytest.mark.django_db

_EXPORTER = InMemorySpanExporter()


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    """The process's tracer provider is set once; each test starts with no spans."""
    if not isinstance(trace.get_tracer_provider(), TracerProvider):
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(_EXPORTER))
        trace.set_tracer_provider(provider)
    _EXPORTER.clear()
    yield _EXPORTER
    _EXPORTER.clear()


def named(exported: InMemorySpanExporter, name: str) -> list[ReadableSpan]:
    return [s for s in exported.get_finished_spans() if s.name == name]


def test_worker_spans_join_the_enqueuers_trace(spans: InMemorySpanExporter, driver: Driver) -> None:
    with trace.get_tracer("the-web-app").start_as_current_span("POST /signup") as request:
        run = jobs.three_steps.enqueue(user_id=7)
    assert run.trace_context is not None and "traceparent" in run.trace_context
    # The worker runs later, elsewhere: no span is current there.
    assert not trace.get_current_span().get_span_context().is_valid
    driver.step()
    [execution] = named(spans, "run tests.three_steps")
    request_context = request.get_span_context()
    assert execution.context is not None and execution.parent is not None
    assert execution.context.trace_id == request_context.trace_id
    assert execution.parent.span_id == request_context.span_id
    assert execution.attributes is not None
    assert execution.attributes["durable_jobs.run_id"] == str(run.id)
    assert execution.attributes["durable_jobs.outcome"] == "succeeded"
    steps = [s for s in spans.get_finished_spans() if s.name.startswith("step ")]
    assert [s.name for s in steps] == ["step one", "step two", "step three"]
    for step in steps:
        assert step.parent is not None and step.parent.span_id == execution.context.span_id


def test_replayed_steps_have_no_span_and_a_failure_is_an_error(
    spans: InMemorySpanExporter, driver: Driver
) -> None:
    jobs.FAIL_ONCE.add("three")
    run = jobs.three_steps.enqueue(user_id=1)
    driver.step()  # attempt 1 fails in "three"
    [failed] = named(spans, "run tests.three_steps")
    assert failed.status.status_code == StatusCode.ERROR
    [three] = named(spans, "step three")
    assert three.status.status_code == StatusCode.ERROR  # the step's exception is recorded
    spans.clear()
    driver.step()  # attempt 2: "one" and "two" replay from storage
    assert [s.name for s in spans.get_finished_spans() if s.name.startswith("step ")] == [
        "step three"
    ]
    [again] = named(spans, "run tests.three_steps")
    assert again.attributes is not None and again.attributes["durable_jobs.attempt"] == 2
    assert JobRun.objects.get(pk=run.pk).status == "succeeded"


def test_no_trace_no_context(spans: InMemorySpanExporter, driver: Driver) -> None:
    run = jobs.noop.enqueue()
    assert run.trace_context is None
    driver.step()
    [execution] = named(spans, "run tests.noop")
    assert execution.parent is None  # a trace of its own


def test_enqueue_many_carries_the_trace_into_each_run(
    spans: InMemorySpanExporter, driver: Driver
) -> None:
    with trace.get_tracer("the-web-app").start_as_current_span("POST /import") as request:
        created = jobs.add.enqueue_many([(1, 2), {"a": 3, "b": 4}])
    assert all(run.trace_context and "traceparent" in run.trace_context for run in created)
    stored = JobRun.objects.filter(pk__in=[run.pk for run in created])
    assert [run.trace_context for run in stored] == [created[0].trace_context] * 2
    driver.drain()
    executions = named(spans, "run tests.add")
    assert len(executions) == 2
    for execution in executions:
        assert execution.parent is not None
        assert execution.parent.span_id == request.get_span_context().span_id


def test_sleep_wait_and_invoke_steps_have_spans_that_say_they_suspended(
    spans: InMemorySpanExporter, driver: Driver
) -> None:
    run = jobs.onboarding.enqueue(user_id=5)
    driver.step(run)  # runs two steps, then sleeps three days
    [sleep] = named(spans, "step sleep:3d")
    assert sleep.attributes is not None
    assert sleep.attributes["durable_jobs.step_kind"] == "sleep"
    assert sleep.attributes["durable_jobs.outcome"] == "suspended"
    assert (
        sleep.attributes["durable_jobs.wake_at"]
        == (driver.clock.now() + timedelta(days=3)).isoformat()
    )
    assert sleep.status.status_code == StatusCode.UNSET  # suspending is not an error
    spans.clear()
    driver.clock.advance("3d")
    driver.step(run)  # the sleep ends (a span) and the wait suspends (a span)
    assert [s.name for s in spans.get_finished_spans() if s.name.startswith("step ")] == [
        "step sleep:3d",
        "step wait-order",
    ]
    [wait] = named(spans, "step wait-order")
    assert wait.attributes is not None and wait.attributes["durable_jobs.step_kind"] == "wait"
    assert "durable_jobs.outcome" not in (named(spans, "step sleep:3d")[0].attributes or {})

    spans.clear()
    caller = parent.enqueue(2)
    driver.drain()
    started, resumed = named(spans, "step call-child")  # started the child; its result
    assert started.attributes is not None and resumed.attributes is not None
    assert started.attributes["durable_jobs.step_kind"] == "invoke"
    assert started.attributes["durable_jobs.outcome"] == "suspended"
    assert "durable_jobs.outcome" not in resumed.attributes
    assert len(named(spans, "run tests.parent")) == 2  # started the child, then resumed
    assert JobRun.objects.get(pk=caller.pk).status == "succeeded"


def test_a_fan_out_step_has_a_span(spans: InMemorySpanExporter, driver: Driver) -> None:
    fanout_jobs.squares.enqueue(2)
    driver.drain()
    fan = named(spans, "step squares")
    assert [s.attributes["durable_jobs.step_kind"] for s in fan if s.attributes] == ["fanout"] * 2
    assert (
        fan[0].attributes is not None and fan[0].attributes["durable_jobs.outcome"] == "suspended"
    )
