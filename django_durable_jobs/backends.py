"""The public path of the ``django.tasks`` backend: users name
``django_durable_jobs.backends.DurableJobsBackend`` in their ``TASKS`` setting and
import ``steps`` from here (docs/reference/django-tasks.md). The code lives in
``contrib/tasks.py``."""

from .contrib.tasks import DurableJobsBackend, DurableTaskContext, asteps, steps

__all__ = ["DurableJobsBackend", "DurableTaskContext", "asteps", "steps"]
