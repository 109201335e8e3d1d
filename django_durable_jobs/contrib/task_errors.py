"""The failures of ``django.tasks`` runs as Django reports them: arguments it cannot
store refused with its own exception type and words, one ``TaskError`` per
failed execution, ``TypeError`` for a return value that is not JSON, and an exception
in hand when ``task_finished`` is sent for a failed task, so that Django's ERROR log
line (``log_task_finished`` reads ``sys.exc_info()``) carries the traceback.

A run stores only its latest error; the earlier ones are kept as one completed step
``django.tasks:error:<attempt>`` per failed attempt, written (fenced by the lease like
every step) before the exception leaves the task.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from .. import conf
from ..engine.attempt import JobContext
from ..engine.serialization import ErrorInfo, NotStorable, roundtrip
from ..exceptions import DurableJobsError, InvalidPayload, RunCancelled, StepOutputInvalid
from ..models import JobRun, RunStatus, StepRecord

if TYPE_CHECKING:
    from django.tasks.base import TaskError

#: The step that keeps the error of one failed attempt.
ERROR_STEP = "django.tasks:error:"


class TaskReturnValueInvalid(StepOutputInvalid, TypeError):
    """A task returned a value that is not JSON. Not retried (the same code returns the
    same value); ``TaskResult.errors`` reports it as ``TypeError``, as Django's own
    backends do."""


class TaskArgumentsInvalid(InvalidPayload, ValueError):
    """Arguments refused for a value Django's own backends refuse with ``ValueError``
    (bytes that are not UTF-8): ``InvalidPayload`` and that ``ValueError`` at once."""


def refused_as_django_refuses(
    exc: InvalidPayload, args: Sequence[Any], kwargs: Mapping[str, Any]
) -> InvalidPayload:
    """``exc``, our refusal of a task's arguments (naming where the value is), with the
    words of the error Django's own backends raise for the same arguments, and of its
    type: ``TypeError("Unsupported type: ...")`` (``InvalidPayload`` is a ``TypeError``)
    or ``ValueError("Unsupported value: ...")``, which code written against them
    catches. ``exc`` itself for a value only we refuse (NaN, a NUL character, ...)."""
    from django.utils.json import normalize_json  # what TaskResult stores them with

    try:
        normalize_json([list(args), dict(kwargs)])
    except (TypeError, ValueError) as djangos:
        message = f"{exc} ({djangos})"
        if isinstance(djangos, TypeError):
            return type(exc)(message)
        return TaskArgumentsInvalid(message)
    except RecursionError:  # nested deeper than its recursion goes, or circular
        pass
    return exc


class RecordedFailure(Exception):
    """A failure recorded by a worker, raised again as text where an exception must be
    in hand (the original object is gone: the worker stored its type and traceback)."""


#: The stored type of that error; runs that failed before the layout by layer stored it
#: under the old path (django_durable_jobs.task_errors) and still report ``TypeError``.
_RETURN_VALUE_INVALID = (
    f"{__name__}.{TaskReturnValueInvalid.__qualname__}",
    f"django_durable_jobs.task_errors.{TaskReturnValueInvalid.__qualname__}",
)
_CANCELLED = f"{RunCancelled.__module__}.{RunCancelled.__qualname__}"


def call_task(ctx: JobContext, path: str, call: Callable[[], Any]) -> Any:
    """Call the task, keeping a failure of its own code as a step of this attempt, and
    refuse a return value that is not JSON with ``TaskReturnValueInvalid``."""
    try:
        value = call()
    except Exception as exc:
        if not isinstance(exc, DurableJobsError):  # ours are stored on the run anyway
            ctx.step.run(f"{ERROR_STEP}{ctx.attempt}", ErrorInfo.of(exc).as_dict)
        raise
    try:
        roundtrip(value)
    except NotStorable as exc:
        if not exc.too_large:  # the size limit is the engine's to enforce, as for any job
            raise TaskReturnValueInvalid(
                f"task {path!r} run {ctx.run_id}: the return value is not JSON: {exc}"
            ) from None
    return value


def task_errors(run: JobRun) -> list[TaskError]:
    """One ``TaskError`` per failed execution of ``run``, oldest first."""
    from django.tasks.base import TaskError

    recorded = []
    if run.attempt > 1 or run.error_type:
        rows = (
            StepRecord.objects.using(conf.database())
            .filter(run=run, name__startswith=ERROR_STEP)
            .order_by("id")
            .values_list("output", flat=True)
        )
        recorded = [ErrorInfo.from_dict(row) for row in rows if isinstance(row, dict)]
    latest = _latest(run)
    # The run's own error is the last recorded one again, unless it came from elsewhere
    # (a timeout, a cancel, a return value that is not JSON): then it is one more.
    if latest is not None and (
        not recorded or (recorded[-1].type, recorded[-1].message) != (latest.type, latest.message)
    ):
        recorded.append(latest)
    return [
        TaskError(exception_class_path=_reported_class(info.type), traceback=info.traceback)
        for info in recorded
    ]


def recorded_failure(run: JobRun) -> RecordedFailure:
    """The run's failure, to raise and handle while ``task_finished`` is sent."""
    latest = _latest(run)
    if latest is None:
        return RecordedFailure(f"run {run.id} failed")
    return RecordedFailure(
        f"{_reported_class(latest.type)}: {latest.message}\n\n"
        f"as recorded by the worker:\n{latest.traceback}".rstrip()
    )


def _latest(run: JobRun) -> ErrorInfo | None:
    if run.error_type:
        return ErrorInfo(type=run.error_type, message=run.error, traceback=run.traceback)
    if run.status == RunStatus.CANCELLED:
        return ErrorInfo(type=_CANCELLED, message=run.error, traceback="")
    return None


def _reported_class(path: str) -> str:
    return "builtins.TypeError" if path in _RETURN_VALUE_INVALID else path
