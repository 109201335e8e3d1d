"""The worker's database connections between runs: kept while they work, dropped
when they broke.

Django closes a connection at the end of each request once it is older than
``CONN_MAX_AGE`` (0 by default: after every request). A worker is not a request: a
default project would reconnect after every run, and pay for it (about five times
fewer no-op runs per second on PostgreSQL). So the worker keeps the jobs database's
connection for as long as it is healthy, whatever ``CONN_MAX_AGE`` says, and applies
Django's own rule to the other databases job code uses.

With Django's connection pool (PostgreSQL, ``OPTIONS={"pool": ...}``) each thread
of a worker holds one of the pool's connections for as long as it lives: the pool
must hold them all (``fit_to_pool``), and is closed before a fork (``close_pools``),
whose child would otherwise share the parent's open connections.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TypeVar

from django.core.exceptions import ImproperlyConfigured
from django.db import close_old_connections, connections

log = logging.getLogger("django_durable_jobs.worker")
T = TypeVar("T")


def keep_healthy(jobs_alias: str) -> None:
    """Between runs: close what broke (or, for other aliases, aged out); keep the rest."""
    for connection in connections.all(initialized_only=True):
        if connection.alias != jobs_alias:
            connection.close_if_unusable_or_obsolete()
            continue
        if connection.connection is None:
            continue
        # Job code that left autocommit off (or a transaction open) hands the next run
        # a connection in an unknown state: start afresh, as Django does.
        if connection.get_autocommit() != connection.settings_dict["AUTOCOMMIT"]:
            connection.close()
        elif connection.errors_occurred:
            if connection.is_usable():
                connection.errors_occurred = False
            else:
                connection.close()


def close_broken_connections() -> None:
    """After a database error: drop every connection that no longer works."""
    close_old_connections()
    for connection in connections.all(initialized_only=True):
        connection.close_if_unusable_or_obsolete()


def on_connection(work: Callable[[], T]) -> T:
    """``work`` on an async lane's database thread; a connection it broke is dropped
    (this thread then reconnects on its next query), whether the error was raised or,
    as the batched step writes do, handed back per record: kept, a cut connection
    failed every later run that this thread served ("the connection is closed")."""
    try:
        return work()
    finally:
        if any(c.errors_occurred for c in connections.all(initialized_only=True)):
            close_broken_connections()


def as_unit_of_work(work: Callable[[], T]) -> T:
    """A sync step function on an async lane's step thread, as Django serves a
    request: the connections it opened are closed after it when ``CONN_MAX_AGE`` says
    so (given back to Django's pool), or when an error made them unusable."""
    try:
        return work()
    finally:
        close_old_connections()


def close_pools() -> None:
    """Close Django's connection pools (and their open connections) before a fork: a
    child that inherited one would send its queries on the parent's sockets, which
    its sibling uses too (it hung on its first query)."""
    connections.close_all()
    for connection in connections.all():
        if pool_size(connection.alias) is not None:
            connection.close_pool()  # type: ignore[attr-defined]  # PostgreSQL's, Django 5.1+


def pool_size(alias: str) -> int | None:
    """The most connections Django's pool for ``alias`` holds; None without a pool."""
    connection = connections[alias]
    if not connection.settings_dict.get("OPTIONS", {}).get("pool"):
        return None
    pool = getattr(connection, "pool", None)  # made here (closed) if not yet: no connection
    return None if pool is None else int(pool.max_size)


#: The connections a worker process holds besides its async lane's: the main thread's
#: (claims, sync runs) and the heartbeat's.
OWN_CONNECTIONS = 2
#: Django's async ORM in an async job (``acreate``, ``aenqueue``, ...) runs on asgiref's
#: one thread-sensitive thread, which keeps a connection of its own for the process's
#: life: uncounted, it left a lane thread of a pool of 4 waiting 30 s per write.
ASYNC_ORM_CONNECTIONS = 1


def _reserved(lane_threads: int) -> int:
    """The connections a worker process holds besides its lane's threads."""
    return OWN_CONNECTIONS + (ASYNC_ORM_CONNECTIONS if lane_threads else 0)


def check_pool(alias: str, lane_threads: int) -> int | None:
    """The pool's size (None without one), refused if it cannot hold a worker's own
    connections (``_reserved``) and, when ``lane_threads`` asks for some, one async
    lane thread: ``runjobs --concurrency N`` asks before it forks (a child refused at
    start would be replaced, and refused again, for ever)."""
    most = pool_size(alias)
    needed = _reserved(lane_threads) + min(lane_threads, 1)
    if most is not None and most < needed:
        raise ImproperlyConfigured(
            f"DATABASES[{alias!r}]['OPTIONS']['pool'] holds at most {most} connection(s); "
            f"a worker process needs {needed} (its main thread, its heartbeat"
            + (", Django's async ORM thread, one for async runs" if lane_threads else "")
            + f"): set 'max_size' to {_reserved(lane_threads) + lane_threads} or more"
        )
    return most


def fit_to_pool(alias: str, lane_threads: int) -> int:
    """How many database threads the async lane may have (``lane_threads`` asked,
    0 without a lane): all of them, unless Django's pool cannot hold them besides the
    worker's other connections (``_reserved``); then as many as it can, said once. A
    pool too small for the worker's own connections is refused: the heartbeat would
    wait for the main thread's connection and the leases expire under a healthy
    worker."""
    most = check_pool(alias, lane_threads)
    reserved = _reserved(lane_threads)
    if most is None:
        return lane_threads
    # With a lane, most - reserved is at least 1: check_pool made sure of it.
    threads = min(lane_threads, most - reserved)
    if threads < lane_threads:
        log.warning(
            "the database pool holds at most %d connections: the async lane gets %d of the "
            "%d ASYNC_CONNECTIONS (set the pool's max_size to %d for all of them)",
            most,
            threads,
            lane_threads,
            reserved + lane_threads,
        )
    # The sync step functions of async jobs run on as many threads as the lane's
    # database threads (``AsyncLane``), each taking a connection of the pool while it
    # runs if it uses the ORM: one that finds none free waits the pool's timeout.
    spare = most - reserved - threads
    if threads and spare < threads:
        log.warning(
            "the database pool holds at most %d connections and the worker keeps %d: %d "
            "left for the sync step functions of async jobs (up to %d at a time), and one "
            "that uses the ORM waits for a free connection up to the pool's timeout (set "
            "the pool's max_size to %d for them too)",
            most,
            reserved + threads,
            spare,
            threads,
            reserved + 2 * lane_threads,
        )
    return threads
