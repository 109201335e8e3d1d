"""``@job``: declare a job. It checks the options, registers the definition and
returns it as a ``Job``: a ``JobDefinition`` you can enqueue.

Enqueueing is a verb (``enqueueing.enqueue_job``), which looks jobs up in the
registry; so the definitions and the registry sit below the verbs (``registry.py``)
and the handle that enqueues sits here, above them. ``runs`` is imported where a run
starts, not at the top: ``@job`` runs when a ``jobs.py`` is imported, which may be
before Django's models are ready.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from datetime import datetime
from typing import TYPE_CHECKING, Any, overload

from .definitions.registry import JobDefinition, JobOptions, define
from .engine.cron import Cron
from .engine.durations import Duration
from .engine.limits import CancelOn, Concurrency, Debounce, RateLimit, Throttle
from .engine.retry import Backoff

if TYPE_CHECKING:
    from .models import JobRun


@dataclass(frozen=True, kw_only=True)
class Job(JobDefinition):
    """A registered job you can enqueue; what ``@job`` returns."""

    def enqueue(self, *args: Any, **kwargs: Any) -> JobRun:
        """Start a run in the caller's transaction; returns the ``JobRun``. It runs the
        highest version of the job registered (``@job(version=N)``), whichever
        version's handle it is called on.

        >>> run = onboarding.enqueue(user_id=42)  # doctest: +SKIP
        """
        return JobCall(self, JobOptions()).enqueue(*args, **kwargs)

    async def aenqueue(self, *args: Any, **kwargs: Any) -> JobRun:
        """``enqueue`` for async views: ``run = await onboarding.aenqueue(user_id=42)``."""
        return await JobCall(self, JobOptions()).aenqueue(*args, **kwargs)

    def enqueue_on_commit(self, *args: Any, **kwargs: Any) -> None:
        """Start a run once the caller's transaction on ``default`` commits (none if it
        rolls back), for jobs on a database of their own (``DURABLE_JOBS["DATABASE"]``),
        where ``enqueue`` is not part of the caller's transaction. The arguments are
        checked now; ``job.using(on_commit_of="orders")`` waits for another alias.

        >>> onboarding.enqueue_on_commit(user_id=42)  # doctest: +SKIP
        """
        JobCall(self, JobOptions()).enqueue_on_commit(*args, **kwargs)

    async def aenqueue_on_commit(self, *args: Any, **kwargs: Any) -> None:
        """``enqueue_on_commit`` for async views."""
        await JobCall(self, JobOptions()).aenqueue_on_commit(*args, **kwargs)

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
        on_commit_of: str | None = None,
    ) -> JobCall:
        """Override options for one enqueue: ``job.using(queue="mail").enqueue(...)``.

        ``run_after`` is an aware datetime or a duration from the enqueue (``"5m"``).
        ``on_commit_of`` is the database alias whose commit ``enqueue_on_commit``
        waits for (``default`` when not given).
        """
        return JobCall(
            self,
            JobOptions(
                queue=queue,
                priority=priority,
                run_after=run_after,
                idempotency_key=idempotency_key,
                on_commit_of=on_commit_of,
            ),
        )


@dataclass(frozen=True)
class JobCall:
    """A job with per-enqueue options, from ``Job.using``."""

    job: JobDefinition
    options: JobOptions

    def using(self, **changes: Any) -> JobCall:
        return JobCall(self.job, replace(self.options, **changes))

    def enqueue(self, *args: Any, **kwargs: Any) -> JobRun:
        from .verbs.enqueue import enqueue_job

        return enqueue_job(self.job, args, kwargs, self.options)

    async def aenqueue(self, *args: Any, **kwargs: Any) -> JobRun:
        """``enqueue`` for async views, on Django's thread-sensitive executor as the
        async ORM does (so it joins a transaction opened there)."""
        from asgiref.sync import sync_to_async

        return await sync_to_async(self.enqueue, thread_sensitive=True)(*args, **kwargs)

    def enqueue_on_commit(self, *args: Any, **kwargs: Any) -> None:
        from .verbs.enqueue import enqueue_job_on_commit

        enqueue_job_on_commit(self.job, args, kwargs, self.options)

    async def aenqueue_on_commit(self, *args: Any, **kwargs: Any) -> None:
        from asgiref.sync import sync_to_async

        await sync_to_async(self.enqueue_on_commit, thread_sensitive=True)(*args, **kwargs)

    def enqueue_many(self, calls: Iterable[Any]) -> list[JobRun]:
        from .verbs.enqueue import enqueue_many_job

        return enqueue_many_job(self.job, calls, self.options)


@overload
def job(fn: Callable[..., Any], /) -> Job: ...
@overload
def job(
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
) -> Callable[[Callable[..., Any]], Job]: ...


def job(
    fn: Callable[..., Any] | None = None,
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
) -> Job | Callable[[Callable[..., Any]], Job]:
    """Register a durable job. Bare (``@job``) or with options.

    >>> @job(name="onboarding", retries=3, timeout="1h")
    ... def onboarding(ctx, user_id: int) -> dict:
    ...     return ctx.step.run("load-user", load_user, user_id)

    ``version=N`` registers another version of a job name beside the others: enqueue
    starts the highest, and each run keeps executing the version it started on.
    """

    def register(function: Callable[..., Any]) -> Job:
        return define(
            Job,
            function,
            name=name,
            version=version,
            queue=queue,
            priority=priority,
            retries=retries,
            backoff=backoff,
            timeout=timeout,
            step_timeout=step_timeout,
            on_event=on_event,
            concurrency=concurrency,
            throttle=throttle,
            rate_limit=rate_limit,
            debounce=debounce,
            cancel_on=cancel_on,
            on_failure=on_failure,
            cron=cron,
        )

    return register(fn) if fn is not None else register
