"""The pauses in the metrics (``observe/metrics.py``): one sample per queue or job
paused now, gone once it is resumed."""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse
from prometheus_client.parser import text_string_to_metric_families

from django_durable_jobs.engine.clock import FakeClock
from django_durable_jobs.verbs import pauses

pytestmark = pytest.mark.django_db


def paused_samples() -> dict[tuple[str, str], float]:
    response = Client().get(reverse("durable-jobs-metrics"))
    assert response.status_code == 200
    return {
        (s.labels["kind"], s.labels["name"]): s.value
        for family in text_string_to_metric_families(response.content.decode())
        for s in family.samples
        if s.name == "durable_jobs_pauses"
    }


def test_each_queue_and_job_paused_is_one_sample_until_it_is_resumed(clock: FakeClock) -> None:
    assert paused_samples() == {}
    pauses.pause("queue", "emails", reason="SMTP provider down")
    pauses.pause("job", "tests.add")
    assert paused_samples() == {("queue", "emails"): 1, ("job", "tests.add"): 1}
    pauses.resume("queue", "emails")
    assert paused_samples() == {("job", "tests.add"): 1}
