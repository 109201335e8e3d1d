"""The jobs on a database of their own (``DURABLE_JOBS["DATABASE"] = "jobs"``, another
database than ``default``, where the project's own rows and the test's users are):
runs, steps, events and workers are written and read there, the admin shows and
operates them there, and nothing of the jobs lands on ``default``.

An enqueue there is not part of the caller's transaction on ``default``:
``enqueue_on_commit`` waits for it, and ``publish_on`` waits for the sender's.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from io import StringIO
from typing import Any

import pytest
from django.core.management import call_command
from django.db import transaction
from django.db.models.signals import post_save
from django.test import Client
from django.urls import reverse

from django_durable_jobs import enqueue_on_commit, publish_event, publish_on
from django_durable_jobs.models import Event, JobRun, RunStatus, StepRecord, Worker
from tests.conftest import Driver
from tests.testapp import event_jobs, jobs
from tests.testapp.models import Effect

pytestmark = pytest.mark.django_db(transaction=True, databases=["default", "jobs", "other"])

JOBS = "jobs"


@pytest.fixture(autouse=True)
def jobs_database(settings: Any) -> None:
    settings.DURABLE_JOBS = {**settings.DURABLE_JOBS, "DATABASE": JOBS}


def nothing_on_default() -> bool:
    models = (JobRun, StepRecord, Event, Worker)
    return all(not model.objects.using("default").exists() for model in models)


class Rollback(Exception):
    pass


def rolled_back(work: Callable[[], object]) -> object:
    """What ``work`` returned, in a transaction on ``default`` that then rolls back."""
    with contextlib.suppress(Rollback), transaction.atomic():
        done = work()
        raise Rollback
    return done


def test_runs_steps_and_events_live_on_the_jobs_database(driver: Driver) -> None:
    run = event_jobs.waiter.enqueue("k")
    assert run._state.db == JOBS
    driver.step(run)
    assert JobRun.objects.using(JOBS).get(pk=run.pk).status == RunStatus.WAITING
    publish_event("keyed", {"n": 1}, key="k")
    driver.drain()
    done = JobRun.objects.using(JOBS).get(pk=run.pk)
    assert done.status == RunStatus.SUCCEEDED and done.result == {"n": 1}
    assert StepRecord.objects.using(JOBS).filter(run_id=run.pk).count() == 1
    assert Event.objects.using(JOBS).filter(name="keyed").count() == 1
    assert nothing_on_default()


def test_an_enqueue_is_not_in_the_callers_transaction_on_default() -> None:
    run = rolled_back(lambda: (Effect.objects.create(name="order"), jobs.noop.enqueue())[1])
    assert isinstance(run, JobRun)
    assert not Effect.objects.exists()
    assert JobRun.objects.using(JOBS).filter(pk=run.pk).exists()  # why on_commit exists


def test_enqueue_on_commit_writes_the_run_when_the_callers_transaction_commits() -> None:

    def both() -> None:
        jobs.noop.enqueue_on_commit()
        enqueue_on_commit("tests.noop")

    rolled_back(both)
    assert not JobRun.objects.using(JOBS).exists()  # rolled back: no run

    with transaction.atomic():
        jobs.add.using(queue="mail").enqueue_on_commit(1, 2)
        enqueue_on_commit("tests.add", 3, b=4)
        assert not JobRun.objects.using(JOBS).exists()  # not before the commit
    runs = JobRun.objects.using(JOBS).order_by("created_at", "id")
    assert sorted((r.queue, r.args, r.kwargs) for r in runs) == [
        ("default", [3], {"b": 4}),
        ("mail", [1, 2], {}),
    ]

    jobs.noop.enqueue_on_commit()  # outside a transaction: at once
    assert JobRun.objects.using(JOBS).filter(job_name="tests.noop").count() == 1
    assert nothing_on_default()


def test_enqueue_on_commit_can_wait_for_another_databases_transaction() -> None:
    with transaction.atomic(using="other"):
        jobs.noop.using(on_commit_of="other").enqueue_on_commit()
        with transaction.atomic():  # default's commit is not the one it waits for
            pass
        assert not JobRun.objects.using(JOBS).exists()
    assert JobRun.objects.using(JOBS).count() == 1


def test_enqueue_on_commit_checks_the_arguments_where_it_is_called() -> None:
    with pytest.raises(TypeError), transaction.atomic():
        jobs.add.enqueue_on_commit(1, 2, 3)  # add(ctx, a, b)
    assert not JobRun.objects.using(JOBS).exists()


@pytest.fixture
def effect_saved() -> Iterator[str]:
    """``publish_on(post_save, sender=Effect)``, connected for this test only."""
    uid = "tests.jobs_database.effect_saved"
    publish_on(
        post_save,
        sender=Effect,
        event="effect.saved",
        key=lambda instance, **kwargs: instance.name,
        payload=lambda instance, **kwargs: {"name": instance.name},
        dispatch_uid=uid,
    )
    yield "effect.saved"
    post_save.disconnect(sender=Effect, dispatch_uid=uid)


def test_publish_on_publishes_when_the_senders_transaction_commits(effect_saved: str) -> None:
    rolled_back(lambda: Effect.objects.create(name="gone"))
    assert not Event.objects.using(JOBS).exists()  # nothing for a rolled-back save

    with transaction.atomic():
        Effect.objects.create(name="kept")
        assert not Event.objects.using(JOBS).exists()  # not before the commit
    event = Event.objects.using(JOBS).get(name=effect_saved)
    assert (event.key, event.payload) == ("kept", {"name": "kept"})
    assert nothing_on_default()


def test_the_admin_shows_and_operates_runs_on_the_jobs_database(
    admin_client: Client, driver: Driver
) -> None:
    waiting = event_jobs.waiter.enqueue("k")
    driver.step(waiting)
    publish_event("other", {}, key="x")
    runs = admin_client.get(reverse("admin:django_durable_jobs_jobrun_changelist"))
    assert [r.pk for r in runs.context["cl"].result_list] == [waiting.pk]
    page = admin_client.get(reverse("admin:django_durable_jobs_jobrun_change", args=[waiting.pk]))
    assert page.status_code == 200 and page.context["original"].status == RunStatus.WAITING
    events = admin_client.get(reverse("admin:django_durable_jobs_event_changelist"))
    assert [e.name for e in events.context["cl"].result_list] == ["other"]
    for name in ("worker", "schedule", "dashboard"):
        assert (
            admin_client.get(reverse(f"admin:django_durable_jobs_{name}_changelist")).status_code
            == 200
        )
    dashboard = admin_client.get(reverse("admin:django_durable_jobs_dashboard_changelist"))
    assert dashboard.context["stats"].runs_by_status[RunStatus.WAITING] == 1

    operate = reverse(
        "admin:django_durable_jobs_jobrun_operate",
        kwargs={"object_id": waiting.pk, "verb": "cancel"},
    )
    assert admin_client.post(operate).status_code == 200  # the confirmation page
    admin_client.post(operate, {"confirmed": "yes"})
    assert JobRun.objects.using(JOBS).get(pk=waiting.pk).status == RunStatus.CANCELLED

    out = StringIO()
    call_command("jobs", "stats", stdout=out)
    assert "cancelled 1 " in out.getvalue()
    assert nothing_on_default()
