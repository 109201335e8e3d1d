"""A run's parent and children on its page: links both ways, fan-out children listed."""

from __future__ import annotations

from django.contrib import admin
from django.urls import reverse
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from ..models import JobRun
from .display import badge
from .times import EMPTY

#: More children than this are summarised with a link to the filtered runs list.
CHILDREN_SHOWN = 50


def run_url(run_id: object) -> str:
    return reverse("admin:django_durable_jobs_jobrun_change", args=[run_id])


class RunFamily:
    """Display methods for ``JobRunAdmin``: the parent run and the child runs."""

    @admin.display(description="parent run")
    def parent_link(self, run: JobRun) -> SafeString | str:
        if run.parent_id is None:
            return EMPTY
        return format_html('<a href="{}">{}</a>', run_url(run.parent_id), run.parent_id)

    @admin.display(description="child runs")
    def children_links(self, run: JobRun) -> SafeString | str:
        """One query, however many children (a fan-out of thousands shows the first)."""
        children = list(
            JobRun.objects.using(run._state.db)
            .filter(parent_id=run.pk)
            .order_by("created_at", "id")
            .values_list("id", "job_name", "status")[: CHILDREN_SHOWN + 1]
        )
        if not children:
            return EMPTY
        shown = format_html_join(
            "",
            '<li><a href="{}">{} {}</a> {}</li>',
            (
                (run_url(child_id), job_name, str(child_id)[:8], badge(status))
                for child_id, job_name, status in children[:CHILDREN_SHOWN]
            ),
        )
        more = ""
        if len(children) > CHILDREN_SHOWN:
            listing = reverse("admin:django_durable_jobs_jobrun_changelist")
            more = format_html(
                '<li><a href="{}?parent__id__exact={}">all child runs</a></li>', listing, run.pk
            )
        return format_html('<ul class="djdj-children">{}{}</ul>', shown, more)
