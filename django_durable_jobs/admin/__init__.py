"""The admin: read-only pages for runs (with each run's step timeline) and events.

Operating a run (retry, cancel, wake now, replay from a step) goes through the verbs
in ``runs.py`` and needs the model's change permission; nothing is edited in a form.
Schedules are the exception: operators add, pause and edit them (``schedules.py``);
and pauses of queues and jobs, added and resumed on their own page (``pauses.py``).
"""

from django.contrib import admin

from ..models import Dashboard, Event, JobRun, Pause, Schedule, Worker
from .dashboard import DashboardAdmin
from .events import EventAdmin
from .pauses import PauseAdmin
from .related import RelatedRunsMixin, RunsAbout
from .runs import JobRunAdmin
from .schedules import ScheduleAdmin
from .workers import WorkerAdmin

admin.site.register(JobRun, JobRunAdmin)
admin.site.register(Event, EventAdmin)
admin.site.register(Schedule, ScheduleAdmin)
admin.site.register(Worker, WorkerAdmin)
admin.site.register(Dashboard, DashboardAdmin)
admin.site.register(Pause, PauseAdmin)

__all__ = [
    "DashboardAdmin",
    "EventAdmin",
    "JobRunAdmin",
    "PauseAdmin",
    "RelatedRunsMixin",
    "RunsAbout",
    "ScheduleAdmin",
    "WorkerAdmin",
]
