"""The timeline of a run an operator ran again (retry, replay): the attempt before ends
where it ended, the idle time until the operator's verb is a labelled gap, and the
next attempt starts after it; no bar spans the gap (``JobRun.reruns``)."""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse

from django_durable_jobs.engine.clock import FakeClock
from django_durable_jobs.models import JobRun, RunStatus
from django_durable_jobs.observe import trace, trace_text
from django_durable_jobs.verbs import runs
from tests.conftest import Driver
from tests.testapp import jobs
from tests.testapp.admin_jobs import fragile, napper

pytestmark = pytest.mark.django_db


def test_an_operator_retry_leaves_the_idle_time_before_it_empty(
    clock: FakeClock, driver: Driver, admin_client: Client
) -> None:
    jobs.FAIL_ONCE.add("fragile-two")
    run = fragile.enqueue()
    driver.step(run)  # "two" fails, and with it the run (no retries)
    failed_at = JobRun.objects.get(pk=run.pk).finished_at
    assert failed_at is not None
    clock.advance("2h")
    retried_at = clock.now()
    runs.retry(run.pk)
    clock.advance("1s")
    driver.step(run)
    done = JobRun.objects.get(pk=run.pk)
    assert done.status == RunStatus.SUCCEEDED

    shown = trace.load(done)
    [gap] = shown.gaps
    assert (gap.ended_at, gap.again_at, gap.status, gap.by) == (
        failed_at,
        retried_at,
        RunStatus.FAILED,
        "retry",
    )
    assert gap.label == "retried by operator after 2h"
    # The failed attempt's bar ends where the gap starts; the retry's starts after it.
    [attempt] = shown.earlier_attempts
    assert attempt.status == RunStatus.FAILED
    assert attempt.bar.left + attempt.bar.width == pytest.approx(gap.bar.left, abs=0.01)
    assert gap.bar.width > 99  # two hours of a run that worked for one second
    assert shown.run_bar.left == pytest.approx(gap.bar.left + gap.bar.width, abs=0.01)
    # The step that failed and then succeeded: cut at the gap too; the one before not.
    rows = {row.name: row for row in shown.steps}
    [piece] = rows["two"].earlier
    assert piece.status == RunStatus.FAILED
    assert piece.bar.left + piece.bar.width <= gap.bar.left + 0.01
    assert rows["two"].bar.left >= gap.bar.left + gap.bar.width - 0.01
    assert rows["one"].earlier == () and rows["one"].bar.left <= gap.bar.left

    html = admin_client.get(
        reverse("admin:django_durable_jobs_jobrun_change", args=[run.pk])
    ).content.decode()
    assert html.count('class="djdj-gap"') == 1
    assert "retried by operator after 2h" in html
    # ``jobs show``: a line, and in its JSON the times.
    assert f"retried by operator after 2h (failed {trace.stamp(failed_at)}, again " in "\n".join(
        trace_text.summary_lines(shown)
    )
    assert trace_text.as_json(shown)["reruns"] == [
        {
            "ended_at": failed_at.isoformat(),
            "status": "failed",
            "again_at": retried_at.isoformat(),
            "by": "retry",
        }
    ]


def test_a_replay_of_a_finished_run_is_a_gap_and_of_a_parked_one_is_not(
    clock: FakeClock, driver: Driver
) -> None:
    run = fragile.enqueue()
    driver.step(run)
    clock.advance("1h")
    runs.replay_from(run.pk, "three")
    driver.step(run)
    [gap] = trace.load(JobRun.objects.get(pk=run.pk)).gaps
    assert (gap.status, gap.label) == (RunStatus.SUCCEEDED, "replayed by operator after 1h")

    asleep = napper.enqueue()
    driver.step(asleep)  # sleeping for 3 days: not finished, nothing idle to show
    runs.replay_from(asleep.pk, "before")
    assert JobRun.objects.get(pk=asleep.pk).reruns == []
