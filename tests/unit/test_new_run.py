"""``JobRun.new`` and ``JobRun.maker``: the runs ``enqueue`` and ``enqueue_many`` build,
equal to ``JobRun(**values)``; ``new_ids``, their ids."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

import pytest
from django.db.models.signals import post_init, pre_init

from django_durable_jobs.models import JobRun, RunStatus
from django_durable_jobs.verbs.enqueue import new_ids

FIELDS = [field.attname for field in JobRun._meta.concrete_fields]


def values(run: JobRun) -> dict[str, Any]:
    return {name: getattr(run, name) for name in FIELDS if name != "id"}


def test_a_new_run_equals_the_keyword_built_one_field_by_field() -> None:
    now = datetime(2026, 12, 3, 10, 0, tzinfo=UTC)
    given = {"job_name": "shop.sync ✓", "args": [1, "ü"], "created_at": now, "wake_at": now}
    new, keyword = JobRun.new(**given), JobRun(**given)
    assert values(new) == values(keyword)
    assert new.status == RunStatus.QUEUED and new.kwargs == {} and new.queue == "default"
    assert new._state.adding and new._state.db is None


def test_callable_defaults_are_called_for_each_run() -> None:
    first, second = JobRun.new(job_name="a"), JobRun.new(job_name="a")
    assert first.id != second.id
    assert first.kwargs is not second.kwargs  # default=dict: not one dict shared by runs
    first.kwargs["x"] = 1
    assert second.kwargs == {}


def test_an_unknown_field_is_a_type_error_naming_it() -> None:
    with pytest.raises(TypeError, match="wake_after"):
        JobRun.new(job_name="a", wake_after=1)


def test_a_new_run_sends_post_init_as_the_model_does() -> None:
    seen: list[JobRun] = []

    def receiver(sender: Any, instance: JobRun, **_: Any) -> None:
        seen.append(instance)

    post_init.connect(receiver, sender=JobRun)
    try:
        run = JobRun.new(job_name="a")
    finally:
        post_init.disconnect(receiver, sender=JobRun)
    assert seen == [run]


def test_a_new_run_sends_pre_init_when_a_receiver_listens_and_equals_the_quiet_build() -> None:
    """Without a receiver ``new`` skips ``Model.__init__`` (and its signals); with one
    it goes through it. Both build the same run."""
    now = datetime(2026, 12, 3, 10, 0, tzinfo=UTC)
    given = {"job_name": "a", "args": [1], "created_at": now, "parent_id": "p", "id": "i"}
    quiet = JobRun.new(**given)
    seen: list[Any] = []

    def receiver(sender: Any, **kwargs: Any) -> None:
        seen.append(sender)

    pre_init.connect(receiver, sender=JobRun)
    try:
        heard = JobRun.new(**given)
    finally:
        pre_init.disconnect(receiver, sender=JobRun)
    assert seen == [JobRun]
    assert values(quiet) == values(heard) and quiet.id == heard.id == "i"
    assert vars(quiet).keys() == vars(heard).keys()
    assert quiet._state.adding and quiet._state.db is None


def test_runs_of_one_maker_share_its_values_and_equal_new_ones() -> None:
    now = datetime(2026, 12, 7, 5, 0, tzinfo=UTC)
    make = JobRun.maker(job_name="shop.sync ✓", queue="mail", created_at=now)
    first, second = make(args=[1], wake_at=now), make(args=[2], wake_at=now)
    alone = JobRun.new(job_name="shop.sync ✓", queue="mail", created_at=now, args=[1], wake_at=now)
    assert values(first) == values(alone)
    assert second.args == [2] and second.queue == "mail" and second.job_name == "shop.sync ✓"
    assert first.id != second.id  # callable defaults made for each run
    assert first.kwargs is not second.kwargs
    assert first._state is not second._state and second._state.adding


def test_an_unknown_field_given_to_a_maker_is_a_type_error_naming_it() -> None:
    with pytest.raises(TypeError, match="wake_after"):
        JobRun.maker(job_name="a", wake_after=1)()
    with pytest.raises(TypeError, match="qeue"):
        JobRun.maker(job_name="a")(qeue="mail")


def test_new_ids_are_random_version_4_uuids_as_uuid4_makes_them() -> None:
    ids = new_ids(1000)
    assert len(set(ids)) == 1000
    for run_id in ids:
        again = uuid.UUID(str(run_id))  # through the checks UUID() makes
        assert again == run_id and hash(again) == hash(run_id)
        assert run_id.version == 4 and run_id.variant == uuid.RFC_4122
        assert run_id.is_safe is uuid.SafeUUID.unknown
    # Every bit but the six fixed ones varies across a thousand ids.
    varying = 0
    for run_id in ids:
        varying |= run_id.int ^ ids[0].int
    assert bin(varying).count("1") == 128 - 6
