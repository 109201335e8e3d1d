"""Small pieces of HTML the admin shows: status badges and escaped, pretty JSON."""

from __future__ import annotations

import re
from functools import cache
from typing import Any

from django.template.loader import get_template
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString, mark_safe

from ..engine.serialization import error_line
from ..models import JobRun, RunStatus, StepStatus, WorkerStatus
from ..observe.formatting import clip
from ..observe.trace import pretty_json

#: The runs list's error, in characters; the whole of it (up to ERROR_TITLE) on hover.
ERROR_WIDTH = 32
ERROR_TITLE = 1000

#: The CSS class of each status's badge (static/django_durable_jobs/timeline.css).
#: Spelled out, not derived, so that a new status without a badge fails a test.
BADGES: dict[str, str] = {
    RunStatus.QUEUED: "djdj-badge--queued",
    RunStatus.RUNNING: "djdj-badge--running",
    RunStatus.SLEEPING: "djdj-badge--sleeping",
    RunStatus.WAITING: "djdj-badge--waiting",
    RunStatus.SUCCEEDED: "djdj-badge--succeeded",
    RunStatus.FAILED: "djdj-badge--failed",
    RunStatus.CANCELLED: "djdj-badge--cancelled",
    RunStatus.SKIPPED: "djdj-badge--skipped",
    StepStatus.COMPLETED: "djdj-badge--completed",
    WorkerStatus.LIVE: "djdj-badge--live",
    WorkerStatus.STOPPED: "djdj-badge--stopped",
    WorkerStatus.LOST: "djdj-badge--lost",
}


def badge(status: str) -> SafeString:
    """A coloured status label; an unknown status gets a plain one."""
    return format_html(
        '<span class="djdj-badge {}">{}</span>', BADGES.get(status, "djdj-badge--other"), status
    )


def job_label(name: str) -> SafeString:
    """A job's name, on one line wherever it is (``billing.collect``, never ``billing.``
    / ``collect``): the lists make room for it (runs.css, workers.css)."""
    return format_html('<span class="djdj-job">{}</span>', name)


def ident(value: object) -> SafeString:
    """An id (a run's, a worker's lease) on one line: never broken inside, as a narrow
    column or the run page's block would break ``3f2a9c`` / ``1b``."""
    return format_html('<span class="djdj-id">{}</span>', value)


def error_summary(run: JobRun, message: str | None = None) -> SafeString | str:
    """A run's error as ``jobs list`` shows it (``ValueError: card declined``), cut to
    ``ERROR_WIDTH`` and breaking after "_" or "." rather than inside a word, the whole
    of it on hover; "" for a run without one. ``message``: the start of ``run.error``
    when the query read only that."""
    message = run.error if message is None else message
    if not (message or run.error_code or run.error_type):
        return ""
    whole = error_line(run.error_type, clip(message, ERROR_TITLE), code=run.error_code)
    short = re.split(r"(?<=[._])", clip(whole, ERROR_WIDTH))
    return format_html(
        '<span class="djdj-error" title="{}">{}</span>',
        whole,
        format_html_join(mark_safe("<wbr>"), "{}", ((part,) for part in short)),
    )


def json_block(value: Any) -> SafeString:
    """``value`` as JSON, escaped (a ``<script>`` stays text): short JSON inline in a
    ``<code>``, longer JSON indented in a ``<pre>``."""
    text = pretty_json(value)
    if "\n" not in text:
        return format_html('<code class="djdj-json djdj-json--inline">{}</code>', text)
    return format_html('<pre class="djdj-json">{}</pre>', text)


def text_block(text: str) -> SafeString | str:
    return format_html('<pre class="djdj-text">{}</pre>', text) if text else "—"


@cache
def tools_beside_title() -> bool:
    """Whether the admin draws a page's buttons beside its title, before the content
    block (Django 6), rather than at the top of the content block (Django 5.2)."""
    template: Any = get_template("admin/base.html")
    return "titles-and-tools" in template.template.source
