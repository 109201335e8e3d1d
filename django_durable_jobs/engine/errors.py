"""The base of every error of the app, and the one the duration parser raises.

They sit here, below ``durations.py``, because ``exceptions.RetryAfter`` parses its
delay with that parser: with them in ``exceptions.py`` the two modules would import
each other. Users import them from ``django_durable_jobs`` or ``.exceptions``; their
``__module__`` says so, because a failed run stores its error's type by that path.
"""

from __future__ import annotations

PUBLIC_MODULE = "django_durable_jobs.exceptions"


class DurableJobsError(Exception):
    """Base class of every error of django-durable-jobs; ``code`` is stable."""

    code = "X_DURABLE_JOBS"
    #: False for errors that retrying cannot fix: the run fails at once.
    retryable = True


class InvalidDuration(DurableJobsError, ValueError):
    """A duration that is not a timedelta, a number of seconds or a string like ``"5m"``."""

    code = "X_DURATION_INVALID"
    retryable = False


for _error in (DurableJobsError, InvalidDuration):
    _error.__module__ = PUBLIC_MODULE
