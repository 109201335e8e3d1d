"""The app's own signals. Each is sent with ``sender`` = the ``JobRun`` class (or
``Event`` for ``event_published``) and the keyword arguments listed."""

from django.dispatch import Signal

run_enqueued = Signal()  # run
run_started = Signal()  # run
step_completed = Signal()  # run_id, step
run_suspended = Signal()  # run, step, resume_at, reason
run_succeeded = Signal()  # run
run_failed = Signal()  # run, error, will_retry
run_cancelled = Signal()  # run
run_skipped = Signal()  # run: enqueued over a RateLimit, never executed
event_published = Signal()  # event
