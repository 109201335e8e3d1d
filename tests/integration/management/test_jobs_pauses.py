"""``manage.py jobs pause``, ``jobs resume`` and ``jobs pauses``: one line for every
mistake, pausing twice keeps the first pause, and ``jobs stats`` shows the pauses."""

from __future__ import annotations

import json
from io import StringIO
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from django_durable_jobs.models import Pause

pytestmark = pytest.mark.django_db


def jobs_command(*args: str, **options: Any) -> str:
    out = StringIO()
    call_command("jobs", *args, stdout=out, **options)
    return out.getvalue()


@pytest.mark.parametrize(
    ("args", "error"),
    [
        (("pause",), "give either --queue Q or --job NAME"),
        (
            ("pause", "--queue", "mail", "--job", "tests.noop"),
            "give either --queue Q or --job NAME",
        ),
        (("resume",), "give either --queue Q or --job NAME"),
        (("pause", "--job", "tests.nope"), "no job is registered as 'tests.nope'"),
    ],
)
def test_a_mistake_is_one_line(args: tuple[str, ...], error: str) -> None:
    with pytest.raises(CommandError) as raised:
        jobs_command(*args)
    assert error in str(raised.value)
    assert "\n" not in str(raised.value)
    assert not Pause.objects.exists()


def test_pause_twice_keeps_the_first_then_resume() -> None:
    out = jobs_command("pause", "--job", "tests.noop", "--reason", "bad deploy", "--by", "alice")
    assert "paused job tests.noop (bad deploy; by alice)" in out
    again = jobs_command("pause", "--job", "tests.noop", "--reason", "other", "--by", "bob")
    assert "job tests.noop was paused already, since" in again
    assert "(bad deploy; by alice)" in again
    assert Pause.objects.get().reason == "bad deploy"
    listed = jobs_command("pauses")
    assert "tests.noop" in listed and "alice" in listed and "bad deploy" in listed
    assert "resumed job tests.noop" in jobs_command("resume", "--job", "tests.noop")
    assert "job tests.noop was not paused" in jobs_command("resume", "--job", "tests.noop")
    assert jobs_command("pauses").strip() == "nothing paused"


def test_an_unknown_queue_is_paused_and_said_so() -> None:
    out = jobs_command("pause", "--queue", "no-such-queue")
    assert "paused queue no-such-queue" in out
    assert "no registered job uses queue 'no-such-queue'" in out
    known = jobs_command("pause", "--queue", "default")
    assert "paused queue default" in known and "no registered job" not in known


def test_stats_and_pauses_as_json_include_the_pauses() -> None:
    jobs_command("pause", "--queue", "mail", "--reason", "SMTP down", "--by", "ops")
    figures = json.loads(jobs_command("stats", "--json"))
    [pause] = figures["pauses"]
    assert {k: pause[k] for k in ("kind", "name", "reason", "paused_by")} == {
        "kind": "queue",
        "name": "mail",
        "reason": "SMTP down",
        "paused_by": "ops",
    }
    assert json.loads(jobs_command("pauses", "--json")) == [pause]
    assert "paused queue mail since" in jobs_command("stats")
