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
    monkeypatch.delitem(sys.modules, "django_durable_jobs.metrics", raising=False)
    with pytest.raises(ImproperlyConfigured) as missing:
        importlib.import_module("django_durable_jobs.metrics")
    assert str(missing.value) == (
        "django_durable_jobs.metrics needs prometheus-client: "
        "pip install 'django-durable-jobs[metrics]'"
    )
    assert isinstance(missing.value.__cause__, ImportError)
