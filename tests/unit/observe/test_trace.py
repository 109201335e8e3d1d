"""The trace (``observe/trace.py``): rows, bars on one time axis, replayed marks, text output.

``build`` is pure: these tests hand it unsaved model instances, no database.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from django_durable_jobs.models import JobRun, RunStatus, StepRecord, StepStatus
from django_durable_jobs.observe import trace, trace_text
from tests.factories import T0


def run_of(**fields: Any) -> JobRun:
    values: dict[str, Any] = {
        "job_name": "tests.ops.fragile",
        "status": RunStatus.SUCCEEDED,
        "created_at": T0,
        "started_at": T0,
        "attempt": 1,
    }
    values.update(fields)
    return JobRun(**values)


def step(
    name: str, status: str = StepStatus.COMPLETED, *, at: float, took: float = 0, **fields: Any
) -> StepRecord:
    started = T0 + timedelta(seconds=at)
    values: dict[str, Any] = {
        "name": name,
        "status": status,
        "started_at": started,
        "completed_at": started + timedelta(seconds=took)
        if status == StepStatus.COMPLETED
        else None,
        "attempts": 1,
    }
    values.update(fields)
    # What the engine records: waits carry their event, sleeps their wake time.
    values.setdefault(
        "kind", "wait" if values.get("event") else "sleep" if values.get("wake_at") else "run"
    )
    return StepRecord(**values)


def test_bars_share_one_axis_from_creation_to_the_end() -> None:
    run = run_of(finished_at=T0 + timedelta(seconds=100))
    steps = [step("a", at=0, took=50), step("b", at=50, took=50)]
    built = trace.build(run, steps, now=T0 + timedelta(days=1), max_attempts=1)
    assert (built.start, built.end) == (T0, T0 + timedelta(seconds=100))
    assert [(row.bar.left, row.bar.width) for row in built.steps] == [(0.0, 50.0), (50.0, 50.0)]
    assert [row.took for row in built.steps] == [timedelta(seconds=50)] * 2
    assert built.run_bar == trace.Bar(0.0, 100.0, False)
    assert [tick.label for tick in built.ticks] == ["+0ms", "+25s", "+50s", "+1m15s", "+1m40s"]


def test_a_sleeping_step_reaches_its_wake_time_and_stays_open() -> None:
    run = run_of(status=RunStatus.SLEEPING, wake_at=T0 + timedelta(hours=1))
    steps = [
        step("load", at=0, took=1),
        step("sleep:1h", StepStatus.SLEEPING, at=1, wake_at=T0 + timedelta(hours=1, seconds=1)),
    ]
    built = trace.build(run, steps, now=T0 + timedelta(seconds=2), max_attempts=4)
    sleep = built.steps[1]
    assert built.end == T0 + timedelta(hours=1, seconds=1)
    assert sleep.kind == "sleep" and sleep.bar.open and sleep.bar.left + sleep.bar.width == 100
    assert sleep.took is None and sleep.wake_text == "until 2026-01-01 01:00:01"
    assert built.attempts_text == "1 / 4" and built.run_bar.open


def test_a_waiting_step_runs_until_now_and_names_its_event() -> None:
    run = run_of(status=RunStatus.WAITING, wake_at=T0 + timedelta(seconds=40))
    waiting = step(
        "wait-order",
        StepStatus.WAITING,
        at=10,
        event="order.paid",
        correlation_key="42",
        wake_at=T0 + timedelta(seconds=40),
        attempts=2,
    )
    built = trace.build(run, [waiting], now=T0 + timedelta(seconds=20), max_attempts=None)
    row = built.steps[0]
    assert row.kind == "wait" and row.bar.open and row.ended_at == T0 + timedelta(seconds=20)
    assert row.wake_text == "order.paid key=42, next check 2026-01-01 00:00:40"
    assert built.attempts_text == "1"  # the job is not registered here: its most unknown


def test_a_failed_step_is_a_marker_with_its_error() -> None:
    run = run_of(status=RunStatus.FAILED, finished_at=T0 + timedelta(seconds=9))
    failed = step(
        "charge", StepStatus.FAILED, at=3, attempts=3, error="declined", error_type="CardError"
    )
    row = trace.build(run, [failed], now=T0, max_attempts=3).steps[0]
    assert row.bar.width == 0 and row.ended_at is None and row.took is None
    assert row.error_line == "CardError: declined"


@pytest.mark.parametrize(
    ("error_type", "line"),
    [
        ("builtins.ValueError", "ValueError: card declined"),
        ("shop.errors.CardDeclined", "shop.errors.CardDeclined: card declined"),
    ],
)
def test_a_failed_steps_error_reads_as_a_tracebacks_last_line(error_type: str, line: str) -> None:
    run = run_of(status=RunStatus.FAILED, finished_at=T0 + timedelta(seconds=9))
    failed = step(
        "charge", StepStatus.FAILED, at=3, error="card declined\nmore", error_type=error_type
    )
    built = trace.build(run, [failed], now=T0, max_attempts=1)
    assert built.steps[0].error_line == line
    assert built.steps[0].shown_type == line.split(":")[0]


@pytest.mark.parametrize(
    ("steps", "expected"),
    [
        # One execution, nothing resumed: nothing replayed.
        ([step("a", at=0), step("b", at=1)], [False, False]),
        # A sleep that slept: the steps before it replayed when the run woke.
        (
            [
                step("a", at=0),
                step("sleep:1h", at=1, took=3600, wake_at=T0 + timedelta(hours=1)),
                step("c", at=3601),
            ],
            [True, False, False],
        ),
        # A step that needed a second attempt: a retry replayed what came before.
        ([step("a", at=0), step("b", at=1, attempts=2), step("c", at=9)], [True, False, False]),
        # A wait that found its event at once did not suspend the run.
        ([step("a", at=0), step("w", at=1, event="e", output={})], [False, False]),
        # Still sleeping: the run has not resumed yet.
        (
            [step("a", at=0), step("s", StepStatus.SLEEPING, at=1, wake_at=T0 + timedelta(days=1))],
            [False, False],
        ),
    ],
)
def test_replayed_marks_follow_from_what_the_records_prove(
    steps: list[StepRecord], expected: list[bool]
) -> None:
    assert trace.replayed_flags(steps) == expected


def test_an_empty_run_still_has_an_axis() -> None:
    built = trace.build(
        run_of(status=RunStatus.QUEUED, started_at=None), [], now=T0, max_attempts=1
    )
    assert built.steps == () and built.end == T0 and built.run_bar == trace.Bar(0.0, 0.0)


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (0.25, "250ms"),
        (1.5, "1.5s"),
        (3, "3s"),
        (45, "45s"),
        (200, "3m20s"),
        (5400, "1h30m"),
        (3600, "1h"),
        (3 * 86400 + 4 * 3600 + 59, "3d4h"),
    ],
)
def test_short_duration(seconds: float, text: str) -> None:
    assert trace.short_duration(timedelta(seconds=seconds)) == text


def test_short_json_stays_on_one_line_long_json_is_indented() -> None:
    assert trace.pretty_json([1]) == "[1]"
    assert trace.pretty_json({"user_id": 42}) == '{"user_id": 42}'
    long = {"email": "ada@example.com", "note": "a note long enough to wrap a line"}
    assert trace.pretty_json(long).splitlines() == [
        "{",
        '  "email": "ada@example.com",',
        '  "note": "a note long enough to wrap a line"',
        "}",
    ]


def test_pretty_json_is_cut_at_the_limit() -> None:
    text = trace.pretty_json({"big": "x" * 100}, limit=20)
    assert text.startswith('{\n  "big": "xxxx') and text.endswith("more characters)")


def test_text_table_pads_before_painting() -> None:
    lines = trace_text.text_table(
        ("#", "status"),
        [("1", "completed"), ("2", "failed")],
        paint=lambda status, text: f"<{text}>",
        status_column=1,
    )
    assert lines == ["#  status", "1  <completed>", "2  <failed   >"]


def test_as_json_has_every_step() -> None:
    run = run_of(finished_at=T0 + timedelta(seconds=1), result={"ok": True})
    built = trace.build(run, [step("a", at=0, took=1, output=[1])], now=T0, max_attempts=1)
    data = trace_text.as_json(built)
    assert data["status"] == "succeeded" and data["result"] == {"ok": True}
    assert data["steps"] == [
        {
            "name": "a",
            "kind": "run",
            "status": "completed",
            "attempts": 1,
            "started_at": "2026-01-01T00:00:00+00:00",
            "completed_at": "2026-01-01T00:00:01+00:00",
            "took": 1.0,
            "replayed": False,
            "unreached": False,
            "wake_at": None,
            "event": None,
            "key": None,
            "child": None,
            "output": [1],
            "error_type": "",
            "error": "",
            "traceback": "",
        }
    ]


def test_steps_the_finishing_code_never_reached_are_named_in_text_and_json() -> None:
    run = run_of(finished_at=T0 + timedelta(seconds=3), job_version=2, unreached_steps=["old-b"])
    steps = [
        step("a", at=0, took=1),
        step("old-b", at=1, took=1),
        step("patch:sms", at=2, kind="patch", output=True),
    ]
    built = trace.build(run, steps, now=T0, max_attempts=1)
    assert built.unreached == ("old-b",)
    assert [row.unreached for row in built.steps] == [False, True, False]
    assert trace_text.unreached_lines(built) == [
        "steps not reached by the code that finished this run "
        "(renamed or removed by a deploy while it was in flight):",
        "  old-b",
    ]
    cells = [trace_text.step_cells(row) for row in built.steps]
    assert cells[1][6] == "not reached" and cells[2][1] == "patch:sms (patch)"
    assert trace_text.summary_lines(built)[0].endswith("queue default  version 2")
    data = trace_text.as_json(built)
    assert (data["job_version"], data["unreached_steps"]) == (2, ["old-b"])
    assert [s["unreached"] for s in data["steps"]] == [False, True, False]
    assert data["steps"][2]["kind"] == "patch" and data["steps"][2]["output"] is True


def test_a_run_that_reached_every_step_says_nothing_of_it() -> None:
    built = trace.build(run_of(), [step("a", at=0)], now=T0, max_attempts=1)
    assert built.unreached == () and trace_text.unreached_lines(built) == []
