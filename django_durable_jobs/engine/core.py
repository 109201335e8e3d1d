"""The engine's core: the work a plan yields (``Io``, ``UserCall``), its per-run knobs,
and ``StepCore``, the state of one attempt with the helpers every step shares (name
checks, replay, saving records, deadlines). No Django here; see ``steps.py``."""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Generator, Iterator, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any, TypeVar

from ..exceptions import (
    InvalidName,
    JobTimeoutError,
    StepDuplicateError,
    StepOutputInvalid,
    Suspension,
)
from . import otel
from .clock import Clock, SystemClock
from .durations import Duration, after, format_duration
from .progress import Progress
from .records import ChildBatches, ChildRuns, EventLookup, Mailbox, RecordedStep, StepStore
from .serialization import ErrorInfo, NotStorable, roundtrip, unstorable
from .vocabulary import StepKind, StepStatus

T = TypeVar("T")
logger = logging.getLogger("django_durable_jobs.steps")

MAX_STEP_NAME = 200
MAX_EVENT_NAME = 200
MAX_KEY = 255
#: The error type of a step whose start is recorded and whose end is not (yet): while
#: the run is running, it is executing; otherwise its worker died inside it.
STEP_LOST = "django_durable_jobs.StepLost"
DEFAULT_WAIT_TIMEOUT = timedelta(hours=24)
DEFAULT_EVENT_POLL = timedelta(seconds=30)


@dataclass(frozen=True, kw_only=True)
class StepLimits:
    """Per-run knobs of the engine, taken from the job and the settings."""

    step_timeout: timedelta | None = None
    event_poll: timedelta = DEFAULT_EVENT_POLL
    max_output_bytes: int | None = 1_000_000


@dataclass(frozen=True, slots=True)
class Io:
    """Work on the stores. A ``write`` is never torn by a timeout: it finishes first."""

    work: Callable[[], Any]
    write: bool = False
    #: The step record ``work`` puts, for a runner that writes several runs' records in
    #: one statement (the async lane's); None for any other work.
    record: RecordedStep | None = None


@dataclass(frozen=True, slots=True)
class UserCall:
    """The user's code of a ``run`` step, performed under the step's time limit."""

    name: str
    fn: Callable[..., Any]
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    #: The step's execution count, for its trace span (``otel.step_span``).
    attempts: int = 1


#: A step's decisions: yields ``Io``/``UserCall``, is sent their results, returns the step's.
Plan = Generator[Io | UserCall, Any, T]

#: Asked before each step: an exception to raise there, None to go on, or an ``Io`` whose
#: work answers (a question only the database can settle, asked the way the engine does
#: its other database work: off the event loop for an async job).
Interrupt = Callable[[], BaseException | Io | None]


class StepCore:
    """The state of one attempt and the helpers its steps share."""

    def __init__(
        self,
        *,
        run_id: str,
        job_name: str,
        store: StepStore,
        events: EventLookup,
        clock: Clock | None = None,
        limits: StepLimits | None = None,
        records: Sequence[RecordedStep] | None = None,
        interrupt: Interrupt | None = None,
        children: ChildRuns | None = None,
        mark_starts: bool = False,
        batches: ChildBatches | None = None,
        mailbox: Mailbox | None = None,
        progress: Progress | None = None,
    ) -> None:
        """``records``: the run's records if the caller already knows them (a run that
        never started has none), saving a read; otherwise they are read at the first
        step. ``interrupt``: asked before each step; an exception it returns is raised
        there (a cancelled run stops at its next step). ``mark_starts``: record each
        ``run`` step's start before its function runs (one more write per step), so a
        worker that dies inside it names it (``STEP_LOST``). ``mailbox``: the messages
        ``receive`` takes; ``progress``: the attempt's ``set_progress`` value, written
        at a step's start when due.
        """
        self.run_id = run_id
        self.job_name = job_name
        self._store = store
        self._events = events
        self._clock = clock or SystemClock()
        self._limits = limits or StepLimits()
        self._loaded = records is not None
        self._records = {record.name: record for record in records or ()}
        self._interrupt = interrupt
        self._children = children
        self._mark_starts = mark_starts
        self._batches = batches
        self._mailbox = mailbox
        self._progress = progress
        self._used: list[str] = []
        self._replayed: list[str] = []
        #: The suspension a step of this attempt raised, if any: the attempt must end
        #: with it (``attempt.swallowed``).
        self.suspended: Suspension | None = None
        #: Patches' answers decided and not written yet (an async job's ``patched`` is
        #: not awaited): written before the next record (``_save``).
        self._unsaved: list[RecordedStep] = []

    # -- the trace -------------------------------------------------------
    @property
    def used_names(self) -> Sequence[str]:
        """Names used in this attempt, in order."""
        return tuple(self._used)

    @property
    def replayed_names(self) -> Sequence[str]:
        """Names served from storage instead of executed."""
        return tuple(self._replayed)

    def records(self) -> Iterator[RecordedStep]:
        """The records this attempt knows, in first-run order."""
        return iter(self._records.values())

    @staticmethod
    def _deadline(
        existing: RecordedStep | None, now: datetime, limit: timedelta, timeout: Duration
    ) -> datetime:
        """When a wait or an invoke gives up: recorded once, when its window opens. A
        record without one (a retry cleared it) opens a fresh window now."""
        if existing is not None and existing.deadline is not None:
            return existing.deadline
        return after(now, limit, timeout)

    # -- helpers -----------------------------------------------------------
    def _begin(self, name: str) -> Plan[RecordedStep | None]:
        if not isinstance(name, str) or not name or len(name) > MAX_STEP_NAME:
            raise InvalidName(
                f"job {self.job_name!r}: step names are non-empty strings of at most "
                f"{MAX_STEP_NAME} characters, got {name!r}"
            )
        if (why := unstorable(name)) is not None:
            raise InvalidName(f"job {self.job_name!r}: step name {name!r} cannot be stored: {why}")
        if self._interrupt is not None:
            stop = self._interrupt()
            if isinstance(stop, Io):
                stop = yield stop
            if stop is not None:
                raise stop
        if self._progress is not None and self._progress.due():
            yield Io(self._progress.flush, write=True)
        if name in self._used:
            raise StepDuplicateError(
                f"job {self.job_name!r} run {self.run_id}: step name {name!r} is used twice "
                "in one attempt; step names are the replay key and must be unique"
            )
        self._used.append(name)
        yield from self._save_answers()  # before this step writes or its user code acts
        if not self._loaded:
            yield from self._load()
        return self._records.get(name)

    def _load(self) -> Plan[None]:
        """Read the run's records (once per attempt, at its first step)."""
        known: Sequence[RecordedStep] = yield Io(lambda: self._store.list(self.run_id))
        self._records = {record.name: record for record in known}
        self._loaded = True

    def _span(self, name: str, kind: StepKind, existing: RecordedStep | None) -> Any:
        """The span of one execution of a step that may suspend the run (``otel.py``);
        a replay has none."""
        attempt = _executions(existing) if existing is not None else 1
        return otel.step_span(name, self.run_id, attempt, str(kind))

    def _lost(self, name: str, attempts: int) -> ErrorInfo:
        return ErrorInfo(
            type=STEP_LOST,
            message=(
                f"step {name!r} started (its attempt {attempts}) and recorded no outcome: "
                "unless the run is running, its worker died inside it (killed, crashed, or "
                "out of memory)"
            ),
            traceback="",
        )

    def _replay(self, record: RecordedStep) -> Any:
        self._replayed.append(record.name)
        return record.output

    def _save(self, record: RecordedStep) -> Plan[None]:
        yield from self._save_answers()
        yield Io(lambda: self._store.put(record), write=True, record=record)
        self._records[record.name] = record

    def _save_answers(self) -> Plan[None]:
        """Write the patches' answers decided since the last write: a record written
        after a patch is never found without the patch's answer (``patches.py``)."""
        while self._unsaved:
            answer = self._unsaved.pop(0)
            yield Io(functools.partial(self._store.put, answer), write=True, record=answer)

    def _fail(self, record: RecordedStep, error: Exception) -> Plan[None]:
        yield from self._save(replace(record, status=StepStatus.FAILED, error=ErrorInfo.of(error)))

    def _storable(self, name: str, value: Any) -> Any:
        try:
            return roundtrip(value, limit=self._limits.max_output_bytes)
        except NotStorable as exc:
            raise StepOutputInvalid(
                f"job {self.job_name!r} run {self.run_id}: the output of step {name!r} "
                f"cannot be stored: {exc}"
            ) from None

    def _check_took(self, name: str, started_at: datetime) -> None:
        # With a fake clock (or no signals) the limit is checked once the step returns.
        limit = self._limits.step_timeout
        if limit is not None and self._clock.now() - started_at > limit:
            raise self._step_timeout(name)

    def _step_timeout(self, name: str) -> JobTimeoutError:
        limit = self._limits.step_timeout or timedelta(0)
        return JobTimeoutError(
            f"job {self.job_name!r} run {self.run_id}: step {name!r} exceeded its "
            f"step_timeout of {format_duration(limit)}"
        )


def _executions(existing: RecordedStep) -> int:
    """A wait or invoke that resumes to look again is the same execution: only one that
    failed before (and runs again on retry) counts another. Counting every look would
    show 20,000 attempts on a 7-day wait polled every 30 s."""
    return existing.attempts + 1 if existing.status is StepStatus.FAILED else existing.attempts
