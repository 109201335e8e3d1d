"""System checks for ``DURABLE_JOBS`` and the settings accessors in ``conf``."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.core.checks import Error, Warning
from django.test import override_settings

from django_durable_jobs import conf
from django_durable_jobs.checks import RULES, check_settings
from django_durable_jobs.exceptions import InvalidDuration


def _check(value: Any) -> list[Error]:
    with override_settings(DURABLE_JOBS=value):
        messages = check_settings()
    assert all(isinstance(message, Error) for message in messages)
    return [message for message in messages if isinstance(message, Error)]


def _ids(value: Any) -> list[str]:
    return [error.id or "" for error in _check(value)]


# -- the whole dict ------------------------------------------------------------------


def test_defaults_give_no_errors() -> None:
    assert _check({}) == []


def test_no_setting_at_all_gives_no_errors(settings: Any) -> None:
    del settings.DURABLE_JOBS
    assert check_settings() == []


def test_every_default_passes_its_own_check() -> None:
    assert _check(dict(conf.DEFAULTS)) == []


def test_every_key_has_a_check_with_its_own_id() -> None:
    assert set(RULES) == set(conf.DEFAULTS)
    ids = [check_id for check_id, _, _ in RULES.values()]
    assert len(ids) == len(set(ids))


@pytest.mark.parametrize("value", [None, [], "default", 3, [("RETRIES", 3)]])
def test_not_a_dict_is_e001(value: Any) -> None:
    (error,) = _check(value)
    assert error.id == "django_durable_jobs.E001"
    assert type(value).__name__ in error.msg
    assert error.hint is not None
    assert "DURABLE_JOBS = {}" in error.hint


def test_unknown_key_is_e009_and_the_hint_lists_known_keys() -> None:
    (error,) = _check({"RETRYS": 3})
    assert error.id == "django_durable_jobs.E009"
    assert "'RETRYS'" in error.msg
    assert error.hint is not None
    for key in conf.DEFAULTS:
        assert key in error.hint


def test_each_unknown_key_is_reported() -> None:
    errors = _check({"RETRYS": 3, "lease": "60s"})
    assert [error.id for error in errors] == ["django_durable_jobs.E009"] * 2
    assert any("'RETRYS'" in error.msg for error in errors)
    assert any("'lease'" in error.msg for error in errors)


# -- one key at a time ---------------------------------------------------------------

BAD_VALUES = [
    ("DATABASE", "nope", "E002"),
    ("DATABASE", 0, "E002"),
    ("DATABASE", None, "E002"),
    ("READ_DATABASE", "replica-nope", "E032"),
    ("READ_DATABASE", 1, "E032"),
    ("LISTEN_DATABASE", "direct-nope", "E033"),
    ("LISTEN_DATABASE", 1, "E033"),
    ("RETRIES", -1, "E003"),
    ("RETRIES", "3", "E003"),
    ("RETRIES", True, "E003"),
    ("RETRIES", 2.0, "E003"),
    ("RETRIES", None, "E003"),
    ("MAX_PAYLOAD_BYTES", 0, "E004"),
    ("MAX_PAYLOAD_BYTES", "1MB", "E004"),
    ("MAX_PAYLOAD_BYTES", True, "E004"),
    ("MAX_OUTPUT_BYTES", -5, "E005"),
    ("MAX_OUTPUT_BYTES", 1e6, "E005"),
    ("AUTODISCOVER", "yes", "E006"),
    ("AUTODISCOVER", 1, "E006"),
    ("AUTODISCOVER", None, "E006"),
    ("BACKOFF", "5 mins", "E010"),
    ("BACKOFF", -1, "E010"),
    ("BACKOFF", None, "E010"),
    ("MAX_BACKOFF", "1 hour", "E011"),
    ("MAX_BACKOFF", None, "E011"),
    ("TIMEOUT", "soon", "E012"),
    ("TIMEOUT", float("nan"), "E012"),
    ("TIMEOUT", 0, "E012"),
    ("STEP_TIMEOUT", "5x", "E013"),
    ("STEP_TIMEOUT", "0s", "E013"),
    ("EVENT_POLL", [30], "E014"),
    ("EVENT_POLL", None, "E014"),
    ("EVENT_POLL", 0, "E014"),
    ("LEASE", "5 mins", "E015"),
    ("LEASE", None, "E015"),
    ("LEASE", timedelta(seconds=-1), "E015"),
    ("LEASE", 0, "E015"),
    ("HEARTBEAT", True, "E016"),
    ("HEARTBEAT", None, "E016"),
    ("HEARTBEAT", timedelta(0), "E016"),
    ("POLL_INTERVAL", "99999999999w", "E017"),
    ("POLL_INTERVAL", None, "E017"),
    ("POLL_INTERVAL", 0.0, "E017"),
    ("WORKER_RETENTION", "forever", "E020"),
    ("WORKER_RETENTION", 0, "E020"),
]


@pytest.mark.parametrize(("key", "value", "check_id"), BAD_VALUES)
def test_bad_value_gets_the_keys_own_id(key: str, value: Any, check_id: str) -> None:
    (error,) = _check({key: value})
    assert error.id == f"django_durable_jobs.{check_id}"
    assert repr(key) in error.msg  # names the key...
    assert repr(value) in error.msg  # ...and the offending value
    assert error.hint is not None
    assert error.hint.startswith("Write ")


HINT_EXAMPLES = {
    "DATABASE": '"default"',
    "READ_DATABASE": '"replica"',
    "LISTEN_DATABASE": '"listen"',
    "RETRIES": "3",
    "MAX_PAYLOAD_BYTES": "1_000_000",
    "MAX_OUTPUT_BYTES": "1_000_000",
    "AUTODISCOVER": "True or False",
    **dict.fromkeys(
        [
            "BACKOFF",
            "MAX_BACKOFF",
            "EVENT_POLL",
            "LEASE",
            "HEARTBEAT",
            "POLL_INTERVAL",
            "WORKER_RETENTION",
        ],
        '"30s"',
    ),
    "TIMEOUT": "or None",
    "STEP_TIMEOUT": "or None",
}


@pytest.mark.parametrize(("key", "value", "check_id"), BAD_VALUES)
def test_hint_says_what_to_write_instead(key: str, value: Any, check_id: str) -> None:
    (error,) = _check({key: value})
    assert error.hint is not None
    assert HINT_EXAMPLES[key] in error.hint


def test_required_durations_hint_does_not_offer_none() -> None:
    (error,) = _check({"LEASE": None})
    assert error.hint is not None
    assert "None" not in error.hint


GOOD_VALUES = [
    ("DATABASE", "default"),
    ("READ_DATABASE", None),
    ("READ_DATABASE", "default"),
    ("LISTEN_DATABASE", None),
    ("LISTEN_DATABASE", "default"),
    ("RETRIES", 0),
    ("RETRIES", 10),
    ("MAX_PAYLOAD_BYTES", 1),
    ("MAX_OUTPUT_BYTES", 5_000_000),
    ("AUTODISCOVER", False),
    ("BACKOFF", 0),  # retry at once
    ("BACKOFF", "250ms"),
    ("MAX_BACKOFF", timedelta(hours=2)),
    ("MAX_BACKOFF", 0),
    ("TIMEOUT", None),
    ("TIMEOUT", "1h"),
    ("STEP_TIMEOUT", None),
    ("STEP_TIMEOUT", 90),
    ("EVENT_POLL", 2.5),
    ("LEASE", "2m"),
    ("HEARTBEAT", "5s"),
    ("POLL_INTERVAL", "100ms"),
]


@pytest.mark.parametrize(("key", "value"), GOOD_VALUES)
def test_good_value_is_accepted(key: str, value: Any) -> None:
    assert _check({key: value}) == []


def test_several_bad_keys_give_several_errors() -> None:
    ids = _ids({"RETRIES": -1, "LEASE": "5 mins", "DATABASE": "nope", "EXTRA": 1})
    assert sorted(ids) == [
        "django_durable_jobs.E002",
        "django_durable_jobs.E003",
        "django_durable_jobs.E009",
        "django_durable_jobs.E015",
    ]


def test_a_bad_key_does_not_hide_good_ones() -> None:
    assert _ids({"RETRIES": 5, "LEASE": None, "TIMEOUT": None}) == ["django_durable_jobs.E015"]


# -- through manage.py check ---------------------------------------------------------


# -- conf ----------------------------------------------------------------------------


def test_conf_get_returns_defaults() -> None:
    with override_settings(DURABLE_JOBS={}):
        for key, default in conf.DEFAULTS.items():
            assert conf.get(key) == default
        assert conf.get("RETRIES") == 3
        assert conf.database() == "default"


def test_conf_get_returns_overrides() -> None:
    with override_settings(DURABLE_JOBS={"RETRIES": 7, "LEASE": "2m", "TIMEOUT": "1h"}):
        assert conf.get("RETRIES") == 7
        assert conf.get("LEASE") == "2m"
        assert conf.duration("LEASE") == timedelta(minutes=2)
        assert conf.required_duration("TIMEOUT") == timedelta(hours=1)
        assert conf.get("HEARTBEAT") == conf.DEFAULTS["HEARTBEAT"]


def test_conf_without_the_setting_uses_defaults(settings: Any) -> None:
    del settings.DURABLE_JOBS
    assert conf.get("RETRIES") == 3
    assert conf.duration("LEASE") == timedelta(seconds=60)


def test_conf_ignores_a_non_dict_setting() -> None:
    # The system check reports it (E001); reading settings must not crash meanwhile.
    with override_settings(DURABLE_JOBS=["RETRIES", 9]):
        assert conf.get("RETRIES") == 3


def test_conf_duration_none_and_required() -> None:
    with override_settings(DURABLE_JOBS={}):
        assert conf.duration("TIMEOUT") is None
        assert conf.required_duration("BACKOFF") == timedelta(seconds=2)
        with pytest.raises(ValueError, match="TIMEOUT"):
            conf.required_duration("TIMEOUT")


def test_conf_duration_rejects_a_bad_value() -> None:
    with override_settings(DURABLE_JOBS={"LEASE": "5 mins"}), pytest.raises(InvalidDuration):
        conf.duration("LEASE")


def test_conf_get_unknown_key_is_a_key_error() -> None:
    with pytest.raises(KeyError):
        conf.get("NOT_A_SETTING")


# -- lease and heartbeat together ----------------------------------------------------------


@pytest.mark.parametrize(("lease", "heartbeat"), [("10s", "5s"), ("60s", "25s"), ("30s", "10.5s")])
def test_fewer_than_three_beats_per_lease_is_w001(lease: str, heartbeat: str) -> None:
    with override_settings(DURABLE_JOBS={"LEASE": lease, "HEARTBEAT": heartbeat}):
        (message,) = check_settings()
    assert isinstance(message, Warning) and not isinstance(message, Error)
    assert message.id == "django_durable_jobs.W001"
    assert "fewer than 3 heartbeats" in message.msg


@pytest.mark.parametrize(
    "value",
    [{}, {"LEASE": "30s", "HEARTBEAT": "10s"}, {"LEASE": "2s", "HEARTBEAT": "0.5s"}],
)
def test_three_or_more_beats_per_lease_pass(value: dict[str, str]) -> None:
    with override_settings(DURABLE_JOBS=value):
        assert check_settings() == []


def test_a_bad_lease_is_reported_once_not_compared() -> None:
    assert _ids({"LEASE": "soon", "HEARTBEAT": "10s"}) == ["django_durable_jobs.E015"]


@pytest.mark.parametrize("value", ["tasks", ["jobs", 3], ["my jobs"], None])
def test_job_modules_must_be_a_list_of_module_names(value: Any) -> None:
    (error,) = _check({"JOB_MODULES": value})
    assert error.id == "django_durable_jobs.E031"
    assert not _check({"JOB_MODULES": ["jobs", "tasks", "background.jobs"]})


# -- the accessors read the setting once, and again after it changed -----------------


def test_the_settings_are_read_once_and_again_when_django_says_they_changed(
    settings: Any,
) -> None:
    settings.DURABLE_JOBS = {"LEASE": "45s"}
    assert conf.required_duration("LEASE") == timedelta(seconds=45)
    kept = conf.user_settings()
    assert conf.user_settings() is kept  # one read of Django's lazy settings, not one per key
    with override_settings(DURABLE_JOBS={"LEASE": "2m", "RETRIES": 7}):
        assert conf.required_duration("LEASE") == timedelta(minutes=2)
        assert conf.get("RETRIES") == 7
    assert conf.required_duration("LEASE") == timedelta(seconds=45)
    assert conf.get("RETRIES") == conf.DEFAULTS["RETRIES"]
    settings.DURABLE_JOBS["LEASE"] = "90s"  # changed in place: the same dict, seen
    assert conf.required_duration("LEASE") == timedelta(seconds=90)
    del settings.DURABLE_JOBS
    assert conf.user_settings() == {} and conf.get("LEASE") == conf.DEFAULTS["LEASE"]
