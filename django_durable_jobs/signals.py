"""The app's own signals. Each is sent with ``sender`` = the ``JobRun`` class (or
``Event`` for ``event_published``) and the keyword arguments listed."""

import logging
from typing import Any

from django.dispatch import Signal

from .engine.vocabulary import StepKind

log = logging.getLogger("django_durable_jobs.signals")

run_enqueued = Signal()  # run
run_started = Signal()  # run
step_completed = Signal()  # run_id, step
run_suspended = Signal()  # run, step, wake_at, kind (StepKind); also resume_at, reason
run_succeeded = Signal()  # run
run_failed = Signal()  # run, error, will_retry
run_cancelled = Signal()  # run
run_skipped = Signal()  # run: enqueued over a RateLimit, never executed
event_published = Signal()  # event

#: ``run_suspended``'s ``reason`` as 0.1 sent it; sent with ``kind`` until the next
#: release (CHANGELOG.md, "Deprecated"), then removed with ``resume_at``.
SUSPENDED_REASON = {
    StepKind.SLEEP: "sleep",
    StepKind.WAIT: "event",
    StepKind.INVOKE: "child",
    StepKind.FANOUT: "child",
    StepKind.RECEIVE: "message",
}


#: dispatch uid -> the prefix of the job names whose runs that receiver acts on
#: (``only_for``): the app's receivers for django.tasks' runs.
_ONLY_FOR: dict[str, str] = {}


def only_for(dispatch_uid: str, prefix: str) -> None:
    """Say that the receiver connected with ``dispatch_uid`` acts only on the runs of
    jobs whose names start with ``prefix`` (``heard``)."""
    _ONLY_FOR[dispatch_uid] = prefix


def heard(signal: Signal, run: Any) -> bool:
    """Whether sending ``signal`` about ``run`` reaches a receiver that acts on it: any
    receiver but those that act on other jobs' runs only (``only_for``). An async run
    sends ``run_started`` off its event loop (a receiver may use the ORM): on Django 6
    the app's own receiver for django.tasks' runs made that a thread hop for every run,
    queued behind the lane's database work."""
    for entry in signal.receivers:
        # Each entry: ((dispatch uid or the receiver's id, the sender's id), receiver, ...).
        prefix = _ONLY_FOR.get(entry[0][0]) if isinstance(entry[0][0], str) else None
        if prefix is None or run.job_name.startswith(prefix):
            # Asked only now: it reads every receiver (their weak references, their
            # senders), as a send does.
            return signal.has_listeners(type(run))
    return False


def announce(signal: Signal, sender: Any, **kwargs: Any) -> None:
    """Send ``signal`` from the worker, about what is already committed: a receiver
    that raises is logged (ERROR, with its traceback) and the others still run. Raised
    out of ``send``, it stopped ``runjobs`` (a sync run's outcome) or skipped the rest of
    an async batch's outcomes (their parents not woken). Not sent about a run that no
    receiver acts on (``heard``): on Django 6 the app's own receivers for django.tasks'
    runs are always connected, and sending to them cost every other run twice."""
    run = kwargs.get("run")
    if run is not None and not heard(signal, run):
        return
    for receiver, response in signal.send_robust(sender=sender, **kwargs):
        if isinstance(response, Exception):
            log.error(
                "signal receiver %s raised %s: %s",
                getattr(receiver, "__qualname__", receiver),
                type(response).__name__,
                response,
                exc_info=response,
            )
