"""An optional extra that is not installed says which one to install, instead of a bare
``ModuleNotFoundError`` from deep inside an import."""

from __future__ import annotations

import importlib
import sys

import pytest
from django.core.exceptions import ImproperlyConfigured


def test_the_metrics_view_without_prometheus_client_names_the_extra(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # None in sys.modules makes `import prometheus_client` fail as if it were not
    # installed; the metrics module is imported afresh (monkeypatch puts both back).
    monkeypatch.setitem(sys.modules, "prometheus_client", None)
    monkeypatch.delitem(sys.modules, "django_durable_jobs.observe.metrics", raising=False)
    with pytest.raises(ImproperlyConfigured) as missing:
        importlib.import_module("django_durable_jobs.observe.metrics")
    assert str(missing.value) == (
        "django_durable_jobs.observe.metrics needs prometheus-client: "
        "pip install 'django-durable-jobs[metrics]'"
    )
    assert isinstance(missing.value.__cause__, ImportError)


def test_without_opentelemetry_the_spans_are_no_ops(monkeypatch: pytest.MonkeyPatch) -> None:
    """The [otel] extra is silent when missing: no trace context is stored at enqueue, a
    run's and a step's spans are empty, a suspension passes through, and the engine runs
    and parks steps as usual (otel.py imported afresh with opentelemetry unimportable)."""
    from django_durable_jobs import engine
    from django_durable_jobs.engine import core, sync_steps
    from django_durable_jobs.engine.clock import FakeClock
    from django_durable_jobs.engine.vocabulary import StepKind
    from django_durable_jobs.exceptions import Suspension

    for name in ("opentelemetry", "opentelemetry.trace", "opentelemetry.propagate"):
        monkeypatch.setitem(sys.modules, name, None)
    monkeypatch.delitem(sys.modules, "django_durable_jobs.engine.otel")
    installed = engine.otel
    monkeypatch.setattr(engine, "otel", installed)  # the import rebinds it: put it back
    otel = importlib.import_module("django_durable_jobs.engine.otel")
    assert otel is not installed and otel.trace is None  # a fresh module, without the API

    assert otel.carrier() is None
    parent = {"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}
    with otel.run_span("demo", "run-1", 1, parent) as done:
        assert done("failed", "X_BOOM") is None
    suspended = Suspension("nap", None, StepKind.SLEEP)
    with pytest.raises(Suspension) as passed, otel.step_span("nap", "run-1", 1, "sleep") as span:
        raise suspended
    assert span is None and passed.value is suspended

    monkeypatch.setattr(core, "otel", otel)
    monkeypatch.setattr(sync_steps, "otel", otel)
    store, clock = sync_steps.MemoryStepStore(), FakeClock()
    events = sync_steps.MemoryEventLog(clock)
    steps = sync_steps.Steps(run_id="r1", job_name="demo", store=store, events=events, clock=clock)
    assert steps.run("double", lambda x: x * 2, 21) == 42
    with pytest.raises(Suspension):
        steps.sleep("nap", "1h")
    assert store.get("r1", "nap") is not None
