"""The run page's details under its timeline: one aligned block (a ``<dl>`` grid,
``django_durable_jobs/run_details.html``, styled by ``run.css``) instead of Django's
fieldset rows, where each row's values start at a different x."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from django.contrib.admin.utils import label_for_field, lookup_field
from django.utils.safestring import SafeString

from ..models import JobRun, RunStatus
from ..observe import run_keys
from .display import ident
from .times import EMPTY

if TYPE_CHECKING:
    from django.contrib.admin.options import BaseModelAdmin

#: A row: two fields side by side on a wide screen, or one that spans the row (JSON,
#: lists, tracebacks). A group starts with a hairline.
Row = tuple[str, ...]
RUN: tuple[Row, ...] = (
    ("id", "status_badge"),
    ("job_name", "job_version"),
    ("queue", "priority"),
    ("attempts", "idempotency_key"),
    ("parent_link",),
    ("children_links",),
)
TIMES: tuple[Row, ...] = (
    ("created", "started"),
    ("finished", "duration"),
    ("wakes", "held"),
    ("lease_owner", "lease_expires"),
)
#: The run's flow-control keys (docs/how-to/flow-control.md), two a row: only those it holds
#: (``key_rows``).
KEYS: tuple[str, ...] = tuple(run_keys.KEYS)
ARGUMENTS: tuple[Row, ...] = (("args_json",), ("kwargs_json",))
PROGRESS: tuple[Row, ...] = (("progress_shown",),)
RESULT: tuple[Row, ...] = (("result_json",),)
ERROR: tuple[Row, ...] = (("error_code", "error_type"), ("error_text",), ("traceback_text",))

#: Fields whose value is an id, kept on one line (``display.ident``).
IDS = frozenset({"id", "lease_owner"})

#: Every field the page can show (the admin's ``readonly_fields``).
FIELDS: tuple[str, ...] = tuple(
    name
    for group in (RUN, (KEYS,), TIMES, PROGRESS, ARGUMENTS, RESULT, ERROR)
    for row in group
    for name in row
)


@dataclass(frozen=True)
class Detail:
    """One ``<dt>``/``<dd>`` pair of the block."""

    label: str
    value: SafeString | str
    #: CSS classes of both: ``djdj-field--first`` starts a row, ``djdj-field--wide`` spans it,
    #: ``djdj-field--group`` is in the first row of a group after the first.
    classes: str


def key_rows(run: JobRun) -> tuple[Row, ...]:
    """The keys ``run`` holds, two a row; none for a run of a job without limits."""
    names = tuple(run_keys.flow_keys(run))
    return tuple(names[start : start + 2] for start in range(0, len(names), 2))


def groups(run: JobRun) -> list[tuple[Row, ...]]:
    """The groups ``run`` shows: its keys if it holds any, its progress once the job
    told some, a result once it succeeded, an error once it has one."""
    shown = [RUN]
    if keys := key_rows(run):
        shown.append(keys)
    shown.append(TIMES)
    if run.progress is not None:
        shown.append(PROGRESS)
    shown.append(ARGUMENTS)
    if run.status == RunStatus.SUCCEEDED:
        shown.append(RESULT)
    if run.error or run.error_code:
        shown.append(ERROR)
    return shown


def run_details(model_admin: BaseModelAdmin[Any], run: JobRun) -> list[Detail]:
    """The block's pairs in reading order, values from the admin's display methods."""
    details = []
    for number, group in enumerate(groups(run)):
        for row_number, row in enumerate(group):
            for position, name in enumerate(row):
                classes = [
                    "djdj-field--first" if position == 0 else "",
                    "djdj-field--wide" if len(row) == 1 else "",
                    "djdj-field--group" if number and row_number == 0 else "",
                ]
                details.append(
                    Detail(
                        label=str(label_for_field(name, JobRun, model_admin)),
                        value=shown_value(model_admin, run, name),
                        classes=" ".join(c for c in classes if c),
                    )
                )
    return details


def shown_value(model_admin: BaseModelAdmin[Any], run: JobRun, name: str) -> SafeString | str:
    if name in run_keys.KEYS:  # a key of "" is every run of the job, not "nothing"
        return run_keys.key_text(run_keys.flow_keys(run)[name])
    field, _attr, value = lookup_field(name, run, model_admin)
    if field is None:
        shown: SafeString | str = value  # a display method's text or HTML
        return shown
    if value is None or value == "":
        return EMPTY
    return ident(value) if name in IDS else str(value)
