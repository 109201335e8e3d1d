"""Job definitions: their options checked, the registry by name (autodiscovery of
``<app>/jobs.py``: ``discovery``).

Below the verbs: ``runs`` starts runs of a ``JobDefinition`` it looks up here. The
``@job`` decorator and the ``Job`` you enqueue are in ``declare.py``, above them.
"""

from __future__ import annotations

import difflib
import inspect
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from functools import cached_property
from inspect import Parameter, Signature
from typing import Any, TypeVar

from ..engine.cron import Cron, crons
from ..engine.durations import Duration
from ..engine.limits import CancelOn, Concurrency, Debounce, Limit, RateLimit, Throttle
from ..engine.limits import cancel_on as _cancel_on
from ..engine.limits import concurrency as _concurrency
from ..engine.limits import debounce as _debounce
from ..engine.limits import rate_limit as _rate_limit
from ..engine.limits import throttle as _throttle
from ..engine.records import Call
from ..engine.retry import Backoff
from ..engine.signatures import signature_of
from ..exceptions import InvalidPayload, UnknownJob
from . import options as check
from .discovery import not_imported, where_jobs_come_from

#: Each job name's highest version: what ``enqueue`` starts.
_registry: dict[str, JobDefinition] = {}
#: Every version of each job name (``@job(version=N)``): what a run keeps executing.
_versions: dict[str, dict[int, JobDefinition]] = {}


@dataclass(frozen=True, kw_only=True)
class JobOptions:
    """How one enqueue differs from the job's defaults (``job.using(...)``).

    Checked when made, by the rules ``@job`` applies to the same options; a duration
    ``run_after`` (``"5m"``) is kept as a ``timedelta`` from the enqueue.
    """

    queue: str | None = None
    priority: int | None = None
    run_after: Duration | datetime | None = None
    idempotency_key: str | None = None
    #: ``enqueue_on_commit``: the database alias whose transaction the run waits for
    #: (None: ``default``, as ``transaction.on_commit``'s).
    on_commit_of: str | None = None

    def __post_init__(self) -> None:
        if self.on_commit_of is not None and not isinstance(self.on_commit_of, str):
            raise TypeError(
                f"using(): on_commit_of is a DATABASES alias, got {self.on_commit_of!r}"
            )
        if self.queue is not None:
            check.text(self.queue, "queue", where="using()")
        if self.priority is not None:
            check.priority(self.priority, where="using()")
        if self.run_after is not None and not isinstance(self.run_after, datetime):
            object.__setattr__(self, "run_after", check.run_after(self.run_after))


@dataclass(frozen=True, kw_only=True)
class JobDefinition:
    """A registered job: the function and its policy. Create with ``@job``."""

    name: str
    fn: Callable[..., Any] = field(repr=False)
    #: ``@job(version=N)``: runs keep the version they started on (``JobRun.job_version``).
    version: int = 1
    queue: str = "default"
    priority: int = 0
    retries: int | None = None
    backoff: Backoff | None = None
    timeout: timedelta | None = None
    step_timeout: timedelta | None = None
    on_event: str | None = None
    #: ``@job(concurrency=...)``, validated (see ``limits``).
    concurrency: Limit | None = None
    throttle: Limit | None = None
    rate_limit: Limit | None = None
    debounce: Limit | None = None
    cancel_on: tuple[CancelOn, ...] = ()
    #: The name of the job enqueued when a run finally fails or is cancelled.
    on_failure: str | None = None
    #: ``@job(cron=...)``: the schedules declared in code (see ``schedules.sync``).
    cron: tuple[Cron, ...] = ()

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.fn(*args, **kwargs)

    @cached_property
    def is_async(self) -> bool:
        """An ``async def`` job: its step API is awaited and it runs on an event loop
        (asked for every claimed run: computed once)."""
        return inspect.iscoroutinefunction(self.fn)

    @property
    def limits(self) -> tuple[Limit, ...]:
        """The limits the claim enforces for this job's runs."""
        return tuple(limit for limit in (self.concurrency, self.throttle) if limit is not None)

    def call(self, *args: Any, **kwargs: Any) -> Call:
        """A child run for ``ctx.step.invoke_all``: ``[send.call(i) for i in ids]``."""
        return Call(self, args, kwargs)


D = TypeVar("D", bound=JobDefinition)


def define(
    kind: type[D],
    function: Callable[..., Any],
    /,
    *,
    name: str | None = None,
    version: int = 1,
    queue: str = "default",
    priority: int = 0,
    retries: int | None = None,
    backoff: Backoff | None = None,
    timeout: Duration | None = None,
    step_timeout: Duration | None = None,
    on_event: str | None = None,
    concurrency: Concurrency | int | None = None,
    throttle: Throttle | None = None,
    rate_limit: RateLimit | None = None,
    debounce: Debounce | None = None,
    cancel_on: CancelOn | list[CancelOn] | None = None,
    on_failure: JobDefinition | str | None = None,
    cron: str | Cron | list[str | Cron] | None = None,
) -> D:
    """Check ``@job``'s options, make the definition (of class ``kind``) and register it.

    ``@job`` (``declare.py``) calls this with ``Job``, the definition you can enqueue;
    the rules live here, next to ``JobOptions``, which applies the same ones.
    """
    _takes_ctx(function)
    job_name = check.origin(function) if name is None else check.text(name, "name", longest=200)
    definition = kind(
        name=job_name,
        fn=function,
        version=check.version(version),
        queue=check.text(queue, "queue"),
        priority=check.priority(priority),
        retries=None if retries is None else check.integer(retries, "retries", minimum=0),
        backoff=check.backoff(backoff),
        timeout=check.positive(timeout, "timeout"),
        step_timeout=check.positive(step_timeout, "step_timeout"),
        on_event=None if on_event is None else check.text(on_event, "on_event"),
        concurrency=_concurrency(concurrency, job_name, function),
        throttle=_throttle(throttle, job_name, function),
        rate_limit=_rate_limit(rate_limit, job_name, function),
        debounce=_debounce(debounce, job_name, function),
        cancel_on=_cancel_on(cancel_on, job_name, function),
        on_failure=_handler(on_failure),
        cron=crons(cron),
    )
    if definition.on_event is not None:  # at import, not in the publisher's save
        _takes_a_payload(definition)
    register_job(definition)
    return definition


def _takes_ctx(function: Callable[..., Any]) -> None:
    """A job function is called as ``fn(ctx, *args, **kwargs)``: refuse, at import, one
    that cannot take the context first (``def send()``, ``def send(*, user_id)``),
    which failed in the worker on every attempt. (``def send(user_id)`` takes the
    context as ``user_id``: ``check_arguments`` says so at enqueue.)"""
    if not callable(function):
        raise TypeError(f"@job decorates a function, got {function!r}")
    try:
        signature = signature_of(function)
    except (TypeError, ValueError):  # a callable without a readable signature
        return
    params = signature.parameters.values()
    positional = (
        Parameter.POSITIONAL_ONLY,
        Parameter.POSITIONAL_OR_KEYWORD,
        Parameter.VAR_POSITIONAL,
    )
    if not any(p.kind in positional for p in params):
        ctx = Parameter("ctx", Parameter.POSITIONAL_OR_KEYWORD)
        wanted = Signature([ctx, *(p.replace(annotation=p.empty) for p in params)])
        raise TypeError(
            f"@job {check.origin(function)}: a job function takes the run's context first, "
            f"ctx, then its arguments: def {getattr(function, '__name__', 'job')}{wanted}"
        )


def _takes_a_payload(definition: JobDefinition) -> None:
    try:
        check_arguments(definition, ({},), {})
    except InvalidPayload as exc:
        raise TypeError(
            f"@job(on_event={definition.on_event!r}) is called as fn(ctx, payload): {exc}"
        ) from None


def register_job(definition: JobDefinition) -> JobDefinition:
    """Add ``definition`` to the registry; a second, different function under one name
    and version fails. Versions of one name (``@job(version=N)``) live side by side."""
    versions = _versions.setdefault(definition.name, {})
    current = versions.get(definition.version)
    if current is not None and check.origin(current.fn) != check.origin(definition.fn):
        raise ValueError(
            f"job name {definition.name!r} version {definition.version} is already used by "
            f"{check.origin(current.fn)}; cannot register {check.origin(definition.fn)} "
            "under the same name and version (a new version: @job(version=...))"
        )
    versions[definition.version] = definition
    _registry[definition.name] = versions[max(versions)]
    return definition


def get_job(name: str, version: int | None = None) -> JobDefinition:
    """The job registered as ``name`` (its highest version, or ``version``), or
    ``UnknownJob`` listing close matches and which modules this process imported
    jobs from, or the versions it has."""
    try:
        latest = _registry[name]
    except KeyError:
        close = difflib.get_close_matches(name, _registry, n=3)
        # The question in parentheses: the clauses are joined by "; ", and "?;" reads as
        # a slip ("… 'onboardng' (did you mean 'onboarding'?); jobs are imported …").
        hint = f" (did you mean {' or '.join(map(repr, close))}?)" if close else ""
        skipped = not_imported()
        raise UnknownJob(
            f"no job is registered as {name!r}{hint}; {where_jobs_come_from()}"
            + (f"; {skipped}" if skipped else "")
        ) from None
    if version is None or version == latest.version:
        return latest
    found = _versions[name].get(version)
    if found is None:
        known = ", ".join(str(v) for v in sorted(_versions[name]))
        raise UnknownJob(
            f"job {name!r} has no version {version} registered here (versions: {known}); "
            "keep @job(version=...) of a version while runs of it are unfinished "
            "(manage.py jobs versions)"
        )
    return found


def latest(definition: JobDefinition) -> JobDefinition:
    """The version of ``definition``'s job that ``enqueue`` starts: the highest one
    registered (``definition`` itself if its name is not registered)."""
    return _registry.get(definition.name, definition)


def jobs_on_event(event: str) -> list[JobDefinition]:
    """The jobs started by ``event`` (``@job(on_event=...)``), each at its highest version."""
    return [definition for definition in _registry.values() if definition.on_event == event]


def all_jobs() -> dict[str, JobDefinition]:
    """Each registered job name's highest version."""
    return dict(_registry)


def all_versions() -> list[JobDefinition]:
    """Every registered version of every job, by name then version."""
    return [
        versions[number] for _, versions in sorted(_versions.items()) for number in sorted(versions)
    ]


def versions_by_name() -> dict[str, list[int]]:
    """The versions this process registers of each job name (``Worker.jobs``)."""
    return {name: sorted(versions) for name, versions in sorted(_versions.items())}


def unregister(name: str, version: int | None = None) -> None:
    """For tests: forget a job (every version of it, or ``version``)."""
    versions = _versions.get(name, {})
    if version is None:
        versions.clear()
    else:
        versions.pop(version, None)
    if versions:
        _registry[name] = versions[max(versions)]
    else:
        _registry.pop(name, None)
        _versions.pop(name, None)


def max_attempts(definition: JobDefinition | None) -> int:
    """``1 + retries`` of ``definition`` (``DURABLE_JOBS["RETRIES"]`` when the job sets
    none); 1 for a job this process does not know. The worker decides retries by it,
    the trace shows it."""
    if definition is None:
        return 1
    from .. import conf

    retries = definition.retries if definition.retries is not None else conf.get("RETRIES")
    return 1 + int(retries)


def attempts_of(name: str, version: int = 1) -> int | None:
    """``max_attempts`` of the job registered as ``name`` at ``version``; None if none
    is (the worker fails such a run with ``X_JOB_UNKNOWN``)."""
    definition = find_job(name, version)
    return None if definition is None else max_attempts(definition)


def find_job(name: str, version: int) -> JobDefinition | None:
    """The job registered as ``name`` at exactly ``version``, or None."""
    return _versions.get(name, {}).get(version)


def check_arguments(
    definition: JobDefinition, args: Sequence[Any], kwargs: Mapping[str, Any], where: str = ""
) -> None:
    """Refuse arguments the job's function cannot be called with, at enqueue rather than
    on every attempt in the worker: ``InvalidPayload`` naming the job, the parameter and
    the signature."""
    # Whether a call binds depends only on its shape: how many positional arguments and
    # which keyword names. A shape that bound once binds again (``Signature.bind`` was
    # a tenth of an ``enqueue_many``'s Python).
    shape: tuple[Any, int, tuple[str, ...]] | None = (definition.fn, len(args), tuple(kwargs))
    try:
        if shape in _FITS:
            return
    except TypeError:  # an unhashable callable: bound every time
        shape = None
    try:
        signature = signature_of(definition.fn)
    except (TypeError, ValueError):  # a callable without a readable signature
        return
    params = signature.parameters.values()
    takes_any = any(p.kind is p.VAR_KEYWORD for p in params)
    # bind() reports a missing parameter before an unknown one; the typo comes first.
    unknown = [] if takes_any else [k for k in kwargs if k not in signature.parameters]
    try:
        if unknown:
            raise TypeError(f"got an unexpected keyword argument {unknown[0]!r}")
        signature.bind(None, *args, **kwargs)  # None stands for ctx
    except TypeError as exc:
        bare = signature.replace(
            parameters=[p.replace(annotation=p.empty) for p in params],
            return_annotation=signature.empty,
        )
        shown = getattr(definition.fn, "__name__", definition.name)
        first = next(iter(signature.parameters), None)
        hint = (
            f" (its first parameter, {first!r}, receives the run's context: did you mean "
            f"def {shown}(ctx, {str(bare)[1:]}?)"
            if first is not None and first not in CONTEXT_NAMES
            else ""
        )
        raise InvalidPayload(
            f"job {definition.name!r}: {where}{exc}; the job is {shown}{bare}{hint}"
        ) from None
    if shape is not None:
        if len(_FITS) >= 4096:  # shapes are few; this only bounds a pathological caller
            _FITS.clear()
        _FITS.add(shape)


#: The shapes of calls that bound (``check_arguments``): (function, positional count,
#: keyword names in order).
_FITS: set[tuple[Any, int, tuple[str, ...]]] = set()


#: The names a job function's first parameter, the run's context, usually has.
CONTEXT_NAMES = frozenset({"ctx", "context", "_ctx", "_", "c", "self", "cls"})


def _handler(value: JobDefinition | str | None) -> str | None:
    if value is None or isinstance(value, JobDefinition):
        return None if value is None else value.name
    return check.text(value, "on_failure (a job or a job name)", longest=200)
