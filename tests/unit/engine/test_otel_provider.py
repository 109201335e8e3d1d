"""Whether spans are made: only once a tracer provider is set up, in code or named by
the environment (``OTEL_PYTHON_TRACER_PROVIDER``, which the API loads when first asked).
Each case in a fresh interpreter: the API's provider is set once per process."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

pytest.importorskip("opentelemetry.sdk")

PROBE = """
from opentelemetry import trace
from django_durable_jobs.engine import otel

def made() -> bool:
    with otel.step_span("s", "r", 1) as span:
        return span is not None

print(otel._untraced(), made())
if {set_in_code}:
    from opentelemetry.sdk.trace import TracerProvider
    trace.set_tracer_provider(TracerProvider())
    print(otel._untraced(), made())
"""


def _probe(set_in_code: bool, environment: dict[str, str]) -> list[str]:
    env = {k: v for k, v in os.environ.items() if k != "OTEL_PYTHON_TRACER_PROVIDER"}
    done = subprocess.run(
        [sys.executable, "-c", PROBE.format(set_in_code=set_in_code)],
        env={**env, **environment},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return done.stdout.splitlines()


def test_no_span_is_made_until_a_provider_is_set_in_code() -> None:
    assert _probe(True, {}) == ["True False", "False True"]


def test_a_provider_named_by_the_environment_makes_spans_from_the_first_step() -> None:
    named = {"OTEL_PYTHON_TRACER_PROVIDER": "sdk_tracer_provider"}
    assert _probe(False, named) == ["False True"]
