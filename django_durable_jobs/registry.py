"""``@job``, job definitions, lookup by name and autodiscovery of ``<app>/jobs.py``."""

from __future__ import annotations

import difflib
import importlib
import inspect
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, overload

from .engine.cron import Cron, crons
from .engine.durations import Duration, parse_duration
from .engine.fanout import Call
from .engine.limits import CancelOn, Concurrency, Debounce, Limit, RateLimit, Throttle
from .engine.limits import cancel_on as _cancel_on
from .engine.limits import concurrency as _concurrency
from .engine.limits import debounce as _debounce
from .engine.limits import rate_limit as _rate_limit
from .engine.limits import throttle as _throttle
from .engine.serialization import unstorable
from .exceptions import InvalidDuration, InvalidName, InvalidPayload, UnknownJob

if TYPE_CHECKING:
    from .models import JobRun

Backoff = Duration | Callable[[int], Duration]
_registry: dict[str, JobDefinition] = {}


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

    def __post_init__(self) -> None:
        if self.queue is not None:
            _text(self.queue, "queue", where="using()")
        if self.priority is not None:
            _priority(self.priority, where="using()")
        if self.run_after is not None and not isinstance(self.run_after, datetime):
            object.__setattr__(self, "run_after", _run_after(self.run_after))


@dataclass(frozen=True, kw_only=True)
class JobDefinition:
    """A registered job: the function and its policy. Create with ``@job``."""

    name: str
    fn: Callable[..., Any] = field(repr=False)
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

    @property
    def is_async(self) -> bool:
        """An ``async def`` job: its step API is awaited and it runs on an event loop."""
        return inspect.iscoroutinefunction(self.fn)

    @property
    def limits(self) -> tuple[Limit, ...]:
        """The limits the claim enforces for this job's runs."""
        return tuple(limit for limit in (self.concurrency, self.throttle) if limit is not None)

    def enqueue(self, *args: Any, **kwargs: Any) -> JobRun:
        """Start a run in the caller's transaction; returns the ``JobRun``.

        >>> run = onboarding.enqueue(user_id=42)  # doctest: +SKIP
        """
        return JobCall(self, JobOptions()).enqueue(*args, **kwargs)

    async def aenqueue(self, *args: Any, **kwargs: Any) -> JobRun:
        """``enqueue`` for async views: ``run = await onboarding.aenqueue(user_id=42)``."""
        return await JobCall(self, JobOptions()).aenqueue(*args, **kwargs)

    def call(self, *args: Any, **kwargs: Any) -> Call:
        """A child run for ``ctx.step.invoke_all``: ``[send.call(i) for i in ids]``."""
        return Call(self, args, kwargs)

    def enqueue_many(self, calls: Iterable[Any]) -> list[JobRun]:
        """Start many runs in batched INSERTs: ``job.enqueue_many([{"user_id": 1}, (2,)])``.

        Each call is a ``dict`` of keyword arguments or a ``tuple`` of positional ones.
        """
        return JobCall(self, JobOptions()).enqueue_many(calls)

    def using(
        self,
        *,
        queue: str | None = None,
        priority: int | None = None,
        run_after: Duration | datetime | None = None,
        idempotency_key: str | None = None,
    ) -> JobCall:
        """Override options for one enqueue: ``job.using(queue="mail").enqueue(...)``.

        ``run_after`` is an aware datetime or a duration from the enqueue (``"5m"``).
        """
        return JobCall(
            self,
            JobOptions(
                queue=queue, priority=priority, run_after=run_after, idempotency_key=idempotency_key
            ),
        )


@dataclass(frozen=True)
class JobCall:
    """A job with per-enqueue options, from ``JobDefinition.using``."""

    job: JobDefinition
    options: JobOptions

    def using(self, **changes: Any) -> JobCall:
        return JobCall(self.job, replace(self.options, **changes))

    def enqueue(self, *args: Any, **kwargs: Any) -> JobRun:
        from .runs import enqueue_job

        return enqueue_job(self.job, args, kwargs, self.options)

    async def aenqueue(self, *args: Any, **kwargs: Any) -> JobRun:
        """``enqueue`` for async views, on Django's thread-sensitive executor as the
        async ORM does (so it joins a transaction opened there)."""
        from asgiref.sync import sync_to_async

        return await sync_to_async(self.enqueue, thread_sensitive=True)(*args, **kwargs)

    def enqueue_many(self, calls: Iterable[Any]) -> list[JobRun]:
        from .runs import enqueue_many_job

        return enqueue_many_job(self.job, calls, self.options)


@overload
def job(fn: Callable[..., Any], /) -> JobDefinition: ...
@overload
def job(
    *,
    name: str | None = None,
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
) -> Callable[[Callable[..., Any]], JobDefinition]: ...


def job(
    fn: Callable[..., Any] | None = None,
    /,
    *,
    name: str | None = None,
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
) -> JobDefinition | Callable[[Callable[..., Any]], JobDefinition]:
    """Register a durable job. Bare (``@job``) or with options.

    >>> @job(name="onboarding", retries=3, timeout="1h")
    ... def onboarding(ctx, user_id: int) -> dict:
    ...     return ctx.step.run("load-user", load_user, user_id)
    """

    def register(function: Callable[..., Any]) -> JobDefinition:
        job_name = _origin(function) if name is None else _text(name, "name", longest=200)
        definition = JobDefinition(
            name=job_name,
            fn=function,
            queue=_text(queue, "queue"),
            priority=_priority(priority),
            retries=None if retries is None else _integer(retries, "retries", minimum=0),
            backoff=_backoff(backoff),
            timeout=_positive(timeout, "timeout"),
            step_timeout=_positive(step_timeout, "step_timeout"),
            on_event=None if on_event is None else _text(on_event, "on_event"),
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
        return register_job(definition)

    return register(fn) if fn is not None else register


def _takes_a_payload(definition: JobDefinition) -> None:
    try:
        check_arguments(definition, ({},), {})
    except InvalidPayload as exc:
        raise TypeError(
            f"@job(on_event={definition.on_event!r}) is called as fn(ctx, payload): {exc}"
        ) from None


def register_job(definition: JobDefinition) -> JobDefinition:
    """Add ``definition`` to the registry; a second, different function under one name fails."""
    current = _registry.get(definition.name)
    if current is not None and _origin(current.fn) != _origin(definition.fn):
        raise ValueError(
            f"job name {definition.name!r} is already used by {_origin(current.fn)}; "
            f"cannot register {_origin(definition.fn)} under the same name"
        )
    _registry[definition.name] = definition
    return definition


def get_job(name: str) -> JobDefinition:
    """The job registered as ``name``, or ``UnknownJob`` listing close matches and
    which modules this process imported jobs from."""
    try:
        return _registry[name]
    except KeyError:
        close = difflib.get_close_matches(name, _registry, n=3)
        hint = f"; did you mean {', '.join(map(repr, close))}?" if close else ""
        raise UnknownJob(
            f"no job is registered as {name!r}{hint}; {where_jobs_come_from()}"
        ) from None


def jobs_on_event(event: str) -> list[JobDefinition]:
    """The jobs started by ``event`` (``@job(on_event=...)``)."""
    return [definition for definition in _registry.values() if definition.on_event == event]


def all_jobs() -> dict[str, JobDefinition]:
    return dict(_registry)


def unregister(name: str) -> None:
    """For tests: forget a job."""
    _registry.pop(name, None)


#: The modules autodiscovery imported, or None before it ran (or with it turned off).
_discovered: list[str] | None = None


def autodiscover() -> list[str]:
    """Import every installed app's ``jobs`` module (like ``admin.autodiscover``), or the
    module names ``DURABLE_JOBS["JOB_MODULES"]`` lists; returns the modules imported."""
    global _discovered
    from django.apps import apps
    from django.utils.module_loading import module_has_submodule

    from . import conf

    found = []
    for app in apps.get_app_configs():
        for module in conf.get("JOB_MODULES"):
            if module_has_submodule(app.module, module):
                importlib.import_module(f"{app.name}.{module}")
                found.append(f"{app.name}.{module}")
    _discovered = found
    return found


def where_jobs_come_from() -> str:
    """Where this process looked for jobs, for people: the start-up banner, UnknownJob."""
    from . import conf

    if _discovered is None:
        return 'jobs were not autodiscovered (DURABLE_JOBS["AUTODISCOVER"] is off)'
    names = " or ".join(f"{module}.py" for module in conf.get("JOB_MODULES"))
    found = ", ".join(_discovered) or "none"
    return (
        f"jobs are imported from each installed app's {names} (found: {found}); "
        'define it there, or add its module name to DURABLE_JOBS["JOB_MODULES"]'
    )


def check_arguments(
    definition: JobDefinition, args: Sequence[Any], kwargs: Mapping[str, Any], where: str = ""
) -> None:
    """Refuse arguments the job's function cannot be called with, at enqueue rather than
    on every attempt in the worker: ``InvalidPayload`` naming the job, the parameter and
    the signature."""
    try:
        signature = inspect.signature(definition.fn)
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
        raise InvalidPayload(
            f"job {definition.name!r}: {where}{exc}; the job is "
            f"{getattr(definition.fn, '__name__', definition.name)}{bare}"
        ) from None


def _origin(fn: Callable[..., Any]) -> str:
    return f"{fn.__module__}.{fn.__qualname__}"


def _text(value: object, what: str, longest: int = 100, where: str = "@job") -> str:
    if not isinstance(value, str) or not value or len(value) > longest:
        raise ValueError(
            f"{where} {what} must be a non-empty string of at most {longest} characters, "
            f"got {value!r}"
        )
    if (why := unstorable(value)) is not None:
        raise InvalidName(f"{where} {what} {value!r} cannot be stored: {why}")
    return value


#: The range of the ``priority`` column (a 32-bit integer on every database).
PRIORITY_RANGE = (-(2**31), 2**31 - 1)


def _priority(value: object, where: str = "@job") -> int:
    lowest, highest = PRIORITY_RANGE
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{where} priority must be an int, got {value!r}")
    if not lowest <= value <= highest:
        raise ValueError(f"{where} priority must be between {lowest} and {highest}, got {value!r}")
    return value


def _run_after(value: object) -> timedelta:
    try:
        return parse_duration(value)
    except InvalidDuration as exc:
        raise InvalidDuration(
            f"using() run_after must be an aware datetime or a duration: {exc}"
        ) from None


def _integer(value: object, what: str, minimum: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"@job {what} must be an int, got {value!r}")
    if minimum is not None and value < minimum:
        raise ValueError(f"@job {what} must be >= {minimum}, got {value!r}")
    return value


def _positive(value: Duration | None, what: str) -> timedelta | None:
    if value is None:
        return None
    parsed = _duration(value, what)
    if not parsed:
        raise ValueError(f"@job {what} must be longer than zero, got {value!r}")
    return parsed


def _backoff(value: Backoff | None) -> Backoff | None:
    if value is None or callable(value):
        return value
    _duration(value, "backoff")  # fail at import time, not at the first retry
    return value


def _handler(value: JobDefinition | str | None) -> str | None:
    if value is None or isinstance(value, JobDefinition):
        return None if value is None else value.name
    return _text(value, "on_failure (a job or a job name)", longest=200)


def _duration(value: Duration, what: str) -> timedelta:
    try:
        return parse_duration(value)
    except InvalidDuration as exc:  # say which option
        raise InvalidDuration(f"@job {what}: {exc}") from None
