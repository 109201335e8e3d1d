"""Runs, step records, events and messages. Public for reading; write through the API.

One module per table family; every name is importable from here, as before."""

from ..engine.vocabulary import StepStatus as StepStatus
from . import installed as installed  # first: says what to do without the app
from .events import Event as Event
from .events import EventPosition as EventPosition
from .events import EventQuerySet as EventQuerySet
from .keys import CancelKey as CancelKey
from .keys import FlowKey as FlowKey
from .keys import IdempotencyKey as IdempotencyKey
from .messages import Message as Message
from .messages import MessageQuerySet as MessageQuerySet
from .operations import Doorbell as Doorbell
from .operations import RunTally as RunTally
from .operations import Schedule as Schedule
from .operations import ScheduleQuerySet as ScheduleQuerySet
from .operations import Worker as Worker
from .operations import WorkerStatus as WorkerStatus
from .pauses import Pause as Pause
from .pauses import PauseKind as PauseKind
from .rules import CANCELLABLE as CANCELLABLE
from .rules import FINISHED as FINISHED
from .rules import LIMITED as LIMITED
from .rules import REPLAYABLE as REPLAYABLE
from .rules import RETRYABLE as RETRYABLE
from .rules import RUNNABLE as RUNNABLE
from .rules import WAKEABLE as WAKEABLE
from .rules import Rule as Rule
from .rules import RunStatus as RunStatus
from .rules import cancelled as cancelled
from .runs import RERUNS_KEPT as RERUNS_KEPT
from .runs import Dashboard as Dashboard
from .runs import JobRun as JobRun
from .runs import JobRunQuerySet as JobRunQuerySet
from .steps import StepRecord as StepRecord
from .steps import StepRecordQuerySet as StepRecordQuerySet
from .transitions import best as best
from .transitions import by_priority as by_priority
from .transitions import in_turn as in_turn
from .transitions import read_best as read_best
