"""OpenTelemetry spans: one per run execution, one per step execution (``step.run``,
sleeps, waits, invokes, fan-outs; not replays), joined to the trace of the code that
enqueued the run.

Optional: with ``opentelemetry-api`` installed (``pip install
'django-durable-jobs[otel]'``) spans go to whatever tracer provider the project set
up; without it every function here is a no-op. No Django import: the engine
(``steps.py``) uses it too.

``enqueue`` and ``enqueue_many`` store ``carrier()`` (the W3C
``traceparent``/``tracestate`` of the span current at enqueue time, e.g. the
request's) on the run; the worker starts the run's span as its child, so a request
and the runs it started are one trace, across processes and machines.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from ..exceptions import Suspension

try:
    from opentelemetry import propagate, trace
    from opentelemetry.environment_variables import OTEL_PYTHON_TRACER_PROVIDER
    from opentelemetry.trace import SpanKind, Status, StatusCode
except ImportError:  # the [otel] extra is not installed
    trace = None  # type: ignore[assignment]
    OTEL_PYTHON_TRACER_PROVIDER = ""

TRACER = "django_durable_jobs"
#: A span's ``done`` callback: the outcome's name and its error code ("" if none).
Done = Callable[[str, str], None]


def _ignore(outcome: str, code: str) -> None:
    return None


def _untraced() -> bool:
    """No tracer provider is set up (the API's proxy is all there is) and no span is
    current: a span would record nothing and carry no trace to anything, so none is
    made (it costs as much as a no-op run's execution)."""
    return not _provider_set() and not trace.get_current_span().get_span_context().is_valid


#: Whether the environment names a tracer provider, which the API loads when it is
#: first asked for one (``trace.get_tracer_provider``).
_FROM_ENVIRONMENT = bool(OTEL_PYTHON_TRACER_PROVIDER) and OTEL_PYTHON_TRACER_PROVIDER in os.environ


def _provider_set() -> bool:
    """Whether the project set a tracer provider up. Until one is set, the API's
    ``get_tracer_provider()`` looks its environment variable up at every call, a
    ``KeyError`` raised and caught inside ``os.environ``: asked per run and per step,
    a twentieth of a worker's time with a thousand async runs in flight. So where the
    environment names none, the API's own global (set once, by
    ``set_tracer_provider``) is read; an API without it is asked."""
    if _FROM_ENVIRONMENT or not hasattr(trace, "_TRACER_PROVIDER"):
        return not isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)
    return trace._TRACER_PROVIDER is not None


def carrier() -> dict[str, str] | None:
    """The current trace context as text headers, or None outside a sampled trace."""
    if trace is None or not trace.get_current_span().get_span_context().is_valid:
        return None
    headers: dict[str, str] = {}
    propagate.inject(headers)
    return headers or None


@contextmanager
def run_span(
    job_name: str, run_id: str, attempt: int, parent: Mapping[str, str] | None
) -> Iterator[Done]:
    """A span around one execution of a run, a child of ``parent`` (the enqueuer's
    context); call the yielded ``done(outcome, error_code)`` before it ends."""
    if trace is None or (not parent and _untraced()):
        yield _ignore
        return
    context = propagate.extract(dict(parent)) if parent else None
    with trace.get_tracer(TRACER).start_as_current_span(
        f"run {job_name}",
        context=context,
        kind=SpanKind.CONSUMER,
        attributes={
            "durable_jobs.job": job_name,
            "durable_jobs.run_id": run_id,
            "durable_jobs.attempt": attempt,
        },
    ) as span:

        def done(outcome: str, code: str) -> None:
            span.set_attribute("durable_jobs.outcome", outcome)
            if outcome == "failed":
                span.set_status(Status(StatusCode.ERROR, code or None))
                if code:
                    span.set_attribute("durable_jobs.error_code", code)

        yield done


@contextmanager
def step_span(name: str, run_id: str, attempt: int, kind: str = "run") -> Iterator[Any]:
    """A span around one execution of a step (not its replays). A step that suspends
    the run (a sleep, a wait, an invoke) ends its span with the outcome "suspended" and
    the time the run resumes; a suspension is not an error."""
    if trace is None or _untraced():
        yield None
        return
    with trace.get_tracer(TRACER).start_as_current_span(
        f"step {name}",
        attributes={
            "durable_jobs.step": name,
            "durable_jobs.step_kind": kind,
            "durable_jobs.run_id": run_id,
            "durable_jobs.step_attempt": attempt,
        },
    ) as span:
        try:
            yield span
        except Suspension as suspended:
            span.set_attribute("durable_jobs.outcome", "suspended")
            if suspended.wake_at is not None:
                span.set_attribute("durable_jobs.wake_at", suspended.wake_at.isoformat())
            raise
