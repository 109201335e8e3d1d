"""Errors that say "another transaction got there first; try again": a serialization
failure (SERIALIZABLE or REPEATABLE READ transactions on PostgreSQL, MariaDB's
snapshot isolation) and a deadlock the database broke by rolling one side back.

The database asks for the transaction to be retried, and it usually succeeds at once:
unlike a lost connection or a restarting server, waiting does not help. A worker
retries such a claim or outcome after a few milliseconds (``pause``), not after its
poll interval or a second, and says so at INFO, not as a warning.
"""

from __future__ import annotations

import random

#: SQLSTATE serialization_failure and deadlock_detected (PostgreSQL; psycopg 3's
#: ``sqlstate``, psycopg2's ``pgcode``).
POSTGRES = frozenset({"40001", "40P01"})
#: MySQL/MariaDB error numbers: ER_LOCK_DEADLOCK, and ER_CHECKREAD ("Record has changed
#: since last read", MariaDB's snapshot isolation on REPEATABLE READ).
MYSQL = frozenset({1213, 1020})
#: The longest pause before a retry, in seconds: long enough that two workers that
#: conflicted do not meet again in step, short against a claim.
MOST = 0.02


def is_conflict(exc: BaseException) -> bool:
    """Whether ``exc`` (Django's wrapper or the driver's error) is a conflict with a
    concurrent transaction that the database asks to retry."""
    cause = exc.__cause__ if exc.__cause__ is not None else exc
    code = getattr(cause, "sqlstate", None) or getattr(cause, "pgcode", None)
    if code is not None:
        return code in POSTGRES
    args: tuple[object, ...] = tuple(getattr(cause, "args", ()))
    return bool(args) and isinstance(args[0], int) and args[0] in MYSQL


def pause() -> float:
    """Seconds to wait before retrying after a conflict: a few milliseconds, at random."""
    return random.uniform(0, MOST)


def describe(exc: BaseException) -> str:
    """One line for the log: what the database said, without its DETAIL and HINT."""
    said = str(exc).strip().splitlines()
    return f"conflict with a concurrent transaction ({said[0] if said else type(exc).__name__})"
