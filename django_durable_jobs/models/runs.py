"""Runs: one execution of a job across its attempts, and the runs a query names. The
writes of each transition are ``transitions.py``'s; the keys a run holds besides its
row, ``keys.py``'s."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable
from datetime import datetime
from typing import Any, NoReturn

from django.apps import apps
from django.db import models
from django.db.models import Q
from django.db.models.base import ModelState
from django.db.models.signals import post_init, pre_init

from ..db.fields import InstantField
from ..db.schema import ExactCharField, PartialIndex
from .rules import FINISHED, LIMITED, RUNNABLE, RunStatus
from .transitions import RunTransitions

#: How many of a run's reruns by an operator it keeps (``JobRun.reruns``).
RERUNS_KEPT = 20


class JobRunQuerySet(RunTransitions["JobRun"]):
    """The runs a query names; the transitions' writes are ``RunTransitions``'."""

    def runnable(self, now: datetime, queues: Iterable[str] | None = None) -> JobRunQuerySet:
        """Runs a worker may claim now, best first: priority, then wake time."""
        qs = self.filter(status__in=RUNNABLE, wake_at__lte=now)
        if queues is not None:
            qs = qs.filter(queue__in=list(queues))
        return qs.order_by("-priority", "wake_at")

    def expired_leases(self, now: datetime, status: str) -> JobRunQuerySet:
        """Runs in ``status`` whose worker stopped renewing its lease: running, or
        cancelled in its hand (``durable_run_lease`` holds both). In no order: the
        reap needs none (the model's default, newest first, would sort them)."""
        return self.filter(status=status, lease_expires_at__lt=now).order_by()


class JobRun(models.Model):
    """One execution of a job, across all its attempts and suspensions."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    job_name = ExactCharField(max_length=200)
    #: The ``@job(version=N)`` the run started on; every attempt executes that version.
    job_version = models.PositiveIntegerField(default=1)
    queue = ExactCharField(max_length=100, default="default")
    priority = models.IntegerField(default=0)
    status = models.CharField(max_length=16, choices=RunStatus.choices, default=RunStatus.QUEUED)
    args = models.JSONField(default=list, blank=True)
    kwargs = models.JSONField(default=dict, blank=True)
    result = models.JSONField(null=True, blank=True)
    #: What the job last told of its progress (``ctx.set_progress``): any JSON value;
    #: ``{"done": 40, "total": 100}`` draws a bar in the admin.
    progress = models.JSONField(null=True, blank=True)
    error_code = models.CharField(max_length=40, blank=True, default="")
    error = models.TextField(blank=True, default="")
    error_type = models.CharField(max_length=200, blank=True, default="")
    traceback = models.TextField(blank=True, default="")
    attempt = models.PositiveIntegerField(default=0)
    # NULL, not "": runs without a key must not collide in the unique constraint.
    idempotency_key = ExactCharField(max_length=255, null=True, blank=True)
    created_at = InstantField()
    started_at = InstantField(null=True, blank=True)
    finished_at = InstantField(null=True, blank=True)
    #: When a queued, sleeping or waiting run becomes runnable.
    wake_at = InstantField(null=True, blank=True)
    lease_owner = ExactCharField(max_length=200, blank=True, default="")
    lease_expires_at = InstantField(null=True, blank=True)
    #: The lease owner under which the attempt in hand began executing, where a claim's
    #: runs may wait in hand before they begin (a batch's: ``LeaseOwner.batch``): a
    #: lapse of such a lease counts the attempt only if this names it
    #: (``claims.requeue_expired``). ``leases.LAPSED``: the run's last lease lapsed.
    attempt_started_by = ExactCharField(max_length=200, blank=True, default="")
    parent = models.ForeignKey(
        "self",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="children",
        db_index=False,  # durable_run_parent: the runs that have one
    )
    #: The schedule that started this run, and the slot it was for (``ctx.scheduled_at``).
    schedule = models.ForeignKey(
        "Schedule",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="runs",
        db_index=False,  # durable_run_schedule: the runs that have one
    )
    scheduled_at = InstantField(null=True, blank=True)
    #: The OpenTelemetry context of the code that enqueued the run (``engine/otel.py``).
    trace_context = models.JSONField(null=True, blank=True)
    # Flow control (docs/how-to/flow-control.md), copied from the job at enqueue so that the
    # claim can enforce it in SQL. NULL: no such limit; a key of "" limits all runs of the job.
    concurrency_key = ExactCharField(max_length=255, null=True, blank=True)
    concurrency_limit = models.PositiveIntegerField(null=True, blank=True)
    throttle_key = ExactCharField(max_length=255, null=True, blank=True)
    throttle_limit = models.PositiveIntegerField(null=True, blank=True)
    throttle_period = models.DurationField(null=True, blank=True)
    rate_limit_key = ExactCharField(max_length=255, null=True, blank=True)
    debounce_key = ExactCharField(max_length=255, null=True, blank=True)
    #: Completed steps the attempt that finished the run never reached: renamed or
    #: removed by a deploy while the run was in flight (``ctx.patched`` guards that).
    unreached_steps = models.JSONField(default=list, blank=True)
    #: Each time an operator ran the finished run again (``retry``, ``replay_from``):
    #: ``{"ended": ..., "status": ..., "again": ..., "by": ...}``, when and how the
    #: attempt before had ended and when it was run again (ISO 8601), the last
    #: ``RERUNS_KEPT``. The timeline shows the idle time between (observe/trace.py).
    reruns = models.JSONField(default=list, blank=True)

    objects = JobRunQuerySet.as_manager()
    #: Set by ``claims.claim``: the status the run had before this worker took it.
    claimed_from: str = RunStatus.QUEUED
    #: Set by ``claims.claim``: True when the run never started before, so it has no steps.
    claimed_fresh: bool = False

    class Meta:
        verbose_name = "run"
        ordering = ("-created_at",)
        constraints = (
            models.UniqueConstraint(
                fields=("job_name", "idempotency_key"), name="durable_run_idempotency_key"
            ),
        )
        indexes = (
            # The claim: runnable runs by priority, then queue, then wake time. Partial,
            # so millions of finished runs do not make it slower. A claim reads one
            # priority at a time (``transitions.by_priority``), so that the wake time
            # bounds its read: the due runs of the queue, then the first parked one. The
            # priority leads because most runs share one: led by the queue, the index
            # looked costlier to PostgreSQL's planner than ``durable_run_runnable_all``
            # (its first column's order is the table's), which then read past every
            # other queue's due runs.
            PartialIndex(
                fields=("-priority", "queue", "wake_at"),
                where=Q(status__in=RUNNABLE),
                # Without partial indexes: a range on the wake time (due runs only,
                # not those sleeping for days), then a sort of the few by priority.
                elsewhere=("status", "queue", "wake_at", "priority"),
                name="durable_run_runnable",
            ),
            # The same for a worker that serves every queue. The queue comes last, so
            # the two indexes are as wide: for a claim of one queue this one reads every
            # queue's due runs of the priority, which the planner then sees (a larger
            # range, not a narrower index) and leaves. (MariaDB and MySQL also have
            # queued runs under no limit in the claim's order,
            # ``durable_run_unlimited_order`` and ``..._all``: built by migration 0002
            # there only, so not declared here.)
            PartialIndex(
                fields=("-priority", "wake_at", "queue"),
                where=Q(status__in=RUNNABLE),
                elsewhere=("status", "wake_at", "priority"),
                name="durable_run_runnable_all",
            ),
            # The reap: runs whose lease expired, running or cancelled in a worker's
            # hand. Only these have a lease (finished runs have none).
            PartialIndex(
                fields=("lease_expires_at",),
                where=Q(lease_expires_at__isnull=False),
                elsewhere=("status", "lease_expires_at"),
                name="durable_run_lease",
            ),
            models.Index(fields=("status", "finished_at"), name="durable_run_finished"),
            # A child's parent and a scheduled run's schedule: most runs have neither,
            # and an index of all of them would hold one NULL entry per run.
            PartialIndex(
                fields=("parent",),
                where=Q(parent__isnull=False),
                elsewhere=("parent",),
                name="durable_run_parent",
            ),
            PartialIndex(
                fields=("schedule",),
                where=Q(schedule__isnull=False),
                elsewhere=("schedule",),
                name="durable_run_schedule",
            ),
            models.Index(fields=("job_name", "created_at"), name="durable_run_job"),
            models.Index(fields=("created_at",), name="durable_run_created"),
            # Runs started per minute and per hour (stats, dashboard, metrics).
            models.Index(fields=("started_at",), name="durable_run_started"),
            # Flow control: the runnable runs under a limit (claimed one key at a time;
            # held runs, without a wake time, are left out: a backlog of one saturated
            # key is not walked by every claim)...
            PartialIndex(
                fields=("-priority", "wake_at"),
                where=Q(status__in=RUNNABLE, wake_at__isnull=False) & LIMITED,
                elsewhere=("status", "wake_at", "priority"),
                name="durable_run_limited",
            ),
            # ... the slots of a key (running, or cancelled but not yet stopped) ...
            PartialIndex(
                fields=("job_name", "concurrency_key", "status"),
                where=Q(concurrency_limit__isnull=False),
                elsewhere=("job_name", "concurrency_key", "status"),
                name="durable_run_concurrency",
            ),
            # ... the runs held back until a slot frees, oldest first ...
            PartialIndex(
                fields=("job_name", "concurrency_key", "created_at"),
                where=Q(status__in=RUNNABLE, wake_at__isnull=True),
                elsewhere=("job_name", "concurrency_key", "status", "created_at"),
                name="durable_run_held",
            ),
            # ... the enqueues of a rate-limit key within its period, a debounced run ...
            PartialIndex(
                fields=("job_name", "rate_limit_key", "created_at"),
                where=Q(rate_limit_key__isnull=False),
                elsewhere=("job_name", "rate_limit_key", "created_at"),
                name="durable_run_rate_limit",
            ),
            PartialIndex(
                fields=("job_name", "debounce_key"),
                where=Q(debounce_key__isnull=False, status=RunStatus.QUEUED),
                elsewhere=("job_name", "debounce_key", "status"),
                name="durable_run_debounce",
            ),
            # ... and the starts of a throttle key within its period.
            PartialIndex(
                fields=("job_name", "throttle_key", "started_at"),
                where=Q(throttle_limit__isnull=False),
                elsewhere=("job_name", "throttle_key", "started_at"),
                name="durable_run_throttle",
            ),
        )

    def __str__(self) -> str:
        return f"{self.job_name} {self.id} ({self.status})"

    @classmethod
    def new(cls, **values: Any) -> JobRun:
        """``JobRun(**values)`` from a dict of the defaults: Django's keyword
        ``__init__`` looks every field up and asks it for its default, a fifth of an
        ``enqueue()``'s Python. The same instance (``pre_init``/``post_init`` sent when
        a receiver listens); an unknown name is a TypeError."""
        # The merge of ``maker``'s runs, written out: through a cached ``maker()`` a
        # call repacks its keywords twice, 1 us more on every ``enqueue()``.
        row = _static().copy()  # the defaults every new run shares, then its own
        for name, make in _MADE:
            if name not in values:
                row[name] = make()
        row.update(values)
        if len(row) > len(_DEFAULTS):
            _refuse(values.keys())
        return _built(cls, row)

    @classmethod
    def maker(cls, **shared: Any) -> Callable[..., JobRun]:
        """``new`` for many runs that share the values ``shared`` (``enqueue_many``):
        the defaults and ``shared`` are merged once, then each call copies them and
        adds its own values; a callable default (a fresh ``dict``, an id) is made for
        each run unless given: 1.6 us a run instead of 2.1 for ``new`` with the shared
        values each time."""
        base = _static().copy()
        base.update(shared)
        made = [(name, make) for name, make in _MADE if name not in shared]
        fields = len(_DEFAULTS)

        def make(**own: Any) -> JobRun:
            row = base.copy()
            for name, default in made:
                if name not in own:
                    row[name] = default()
            row.update(own)
            if len(row) > fields:
                _refuse(shared.keys() | own.keys())
            return _built(cls, row)

        return make

    @property
    def is_finished(self) -> bool:
        return self.status in FINISHED

    def wait(self, timeout: Any = None) -> Any:
        """Block until this run finishes; return its result (README "Results and
        messages"). Raises ``RunFailed`` (``X_RUN_FAILED``, with the run's
        ``error_code`` and ``error``) for a failed run, ``RunCancelled`` for a cancelled
        or skipped one, ``TimeoutError`` once ``timeout`` (a duration; None: no limit)
        has passed. On PostgreSQL (psycopg 3) it wakes on the run's finish (NOTIFY);
        elsewhere it polls, every 10 ms at first, then at most every 200 ms. The run's
        fields are read again meanwhile, so ``self`` is up to date when it returns.

        >>> report.enqueue(7).wait(timeout="30s")  # doctest: +SKIP
        """
        return _results().wait(self, timeout)

    async def await_result(self, timeout: Any = None) -> Any:
        """``wait`` for async code: ``result = await run.await_result(timeout="30s")``.
        The event loop is not blocked; no thread is held while the run is unfinished."""
        return await _results().await_result(self, timeout)


def _results() -> Any:
    """How runs are waited for (``verbs/results.py``), through the app's config: the
    models stay below the verbs (tests/unit/test_layers.py)."""
    return apps.get_app_config("django_durable_jobs")


#: (attname, default, factory) of each concrete field of ``JobRun``, in order: the
#: factory for a callable default (``uuid4``, ``list``), else the value Django's
#: ``get_default`` returns every time (it returns the very same object, too).
_DEFAULTS: list[tuple[str, Any, Any]] = []


def _heard(cls: type[JobRun]) -> bool:
    """Whether a receiver of ``pre_init`` or ``post_init`` hears of a new ``cls``."""
    if not (pre_init.receivers or post_init.receivers):
        return False
    return pre_init.has_listeners(cls) or post_init.has_listeners(cls)


def _refuse(names: Iterable[str]) -> NoReturn:
    unknown = sorted(set(names) - {name for name, _, _ in _DEFAULTS})
    raise TypeError(f"JobRun() got unexpected keyword argument(s): {unknown}")


def _built(cls: type[JobRun], row: dict[str, Any]) -> JobRun:
    """The run of ``row`` (every field's value), as ``JobRun(*row)`` builds it."""
    if _heard(cls):
        build: Callable[..., JobRun] = cls  # positional: the stubs know only keywords
        return build(*(row[name] for name, _, _ in _DEFAULTS))
    # What Model.__init__ does for a full positional row, without its two signals no
    # receiver hears: half the cost of a new run. The field descriptors that define
    # __set__ (a foreign key's ``parent_id``) only forget a cached related object,
    # which a new instance has none of.
    row["_state"] = ModelState()
    run = cls.__new__(cls)
    run.__dict__ = row
    return run


def _static() -> dict[str, Any]:
    """attname -> default of every field, the callable ones' made on each ``new``
    (``_MADE``)."""
    if not _STATIC:
        for name, default, make in _defaults():
            _STATIC[name] = default
            if make is not None:
                _MADE.append((name, make))
    return _STATIC


_STATIC: dict[str, Any] = {}
#: (attname, factory) of the fields with a callable default (``uuid4``, ``list``).
_MADE: list[tuple[str, Any]] = []


def _defaults() -> list[tuple[str, Any, Any]]:
    if not _DEFAULTS:
        for field in JobRun._meta.concrete_fields:
            if field.has_default() and callable(field.default):
                _DEFAULTS.append((field.attname, None, field.default))
            else:
                _DEFAULTS.append((field.attname, field.get_default(), None))
    return _DEFAULTS


class Dashboard(JobRun):
    """No table of its own: gives the admin's dashboard page a place in the app list
    (``/admin/django_durable_jobs/dashboard/``); it shows figures about runs."""

    class Meta:
        proxy = True
        verbose_name = "dashboard"
        verbose_name_plural = "dashboard"
