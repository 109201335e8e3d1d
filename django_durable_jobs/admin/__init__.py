"""The admin: read-only pages for runs (with each run's step timeline) and events.

Operating a run (retry, cancel, wake now, replay from a step) goes through the verbs
in ``runs.py`` and needs the model's change permission; nothing is edited in a form.
"""

from django.contrib import admin

from ..models import Event, JobRun
from .events import EventAdmin
from .runs import JobRunAdmin

admin.site.register(JobRun, JobRunAdmin)
admin.site.register(Event, EventAdmin)

__all__ = ["EventAdmin", "JobRunAdmin"]
