"""What differs between the databases, in one place: a ``Dialect`` per database alias,
chosen once (``of(using)``) from its vendor and driver.

- ``Dialect`` (``orm_dialect.py``): the ORM, for any database; SQLite gets it as it is
  (no row locks: claims read, then a guarded UPDATE that SQLite's single writer
  makes safe).
- ``MySQL`` (MariaDB, MySQL): the claim locks a shortlist by primary key (no partial
  indexes), and reads that follow a lock ask for the latest committed rows.
- ``Postgres`` (psycopg2): ``FOR UPDATE SKIP LOCKED``; a cut connection is one
  ``pg_terminate_backend`` away (fault injection).
- ``Psycopg`` (PostgreSQL through psycopg 3): the one-round-trip path of
  ``postgresql/claims.py``: the claim that also records the previous outcome, runs inserted
  with ``unnest``, prepared fenced step inserts, and LISTEN/NOTIFY wake-ups.

Callers ask the dialect what to do (``claim``, ``insert_runs``, ``execute_fenced``)
or what it offers (``fused``, ``listens``), never the connection's vendor.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from django.db import connections

from .orm_dialect import Dialect, Locking, MySQL, SQLite
from .postgresql.dialect import Postgres, Psycopg

__all__ = ["Dialect", "Locking", "MySQL", "Postgres", "Psycopg", "SQLite", "chosen", "of"]

_CHOSEN: dict[str, Dialect] = {}


def of(using: str) -> Dialect:
    """The dialect of the database alias ``using``, chosen on first use."""
    dialect = _CHOSEN.get(using)
    if dialect is None:
        dialect = _CHOSEN[using] = _choose(using)
    return dialect


def _choose(using: str) -> Dialect:
    connection = connections[using]
    if connection.vendor == "postgresql":
        # The one-round-trip path needs psycopg 3 (``notifies``, prepared statements).
        driver = getattr(getattr(connection, "Database", None), "__name__", "")
        return Psycopg(using) if driver == "psycopg" else Postgres(using)
    if connection.vendor == "mysql":
        return MySQL(using)
    if connection.vendor == "sqlite":
        return SQLite(using)
    if connection.features.has_select_for_update_skip_locked:
        return Locking(using)
    return Dialect(using)


@contextmanager
def chosen(using: str, dialect: Dialect) -> Iterator[Dialect]:
    """Use ``dialect`` for ``using`` within the block (tests: the generic ORM path on
    PostgreSQL)."""
    before = _CHOSEN.get(using)
    _CHOSEN[using] = dialect
    try:
        yield dialect
    finally:
        if before is None:
            _CHOSEN.pop(using, None)
        else:
            _CHOSEN[using] = before
