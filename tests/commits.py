"""Counting the commits a piece of code makes on a connection (the tests' own tool).

Django logs no COMMIT, and a statement in autocommit mode commits without one, so
``Commits`` counts them from the statements: a write outside any atomic block is a
commit of its own; the writes inside an outermost atomic block commit once, when it
does (``on_commit``), and not at all when it rolls back. Reads are not counted.
"""

from __future__ import annotations

from collections.abc import Callable
from types import TracebackType
from typing import Any

from django.db.backends.base.base import BaseDatabaseWrapper

#: Statements that write no row: reads, transaction control, PostgreSQL's PREPARE.
UNCOUNTED = {"SELECT", "BEGIN", "COMMIT", "ROLLBACK", "SAVEPOINT", "RELEASE", "PREPARE"}


class Commits:
    """``with Commits(connection) as commits: ...``; then ``commits.count``."""

    def __init__(self, connection: BaseDatabaseWrapper) -> None:
        self.connection = connection
        self.count = 0
        self._wrapper: Any = None

    def __enter__(self) -> Commits:
        self._wrapper = self.connection.execute_wrapper(self._seen)
        self._wrapper.__enter__()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self._wrapper.__exit__(kind, error, traceback)

    def _seen(
        self, execute: Callable[..., Any], sql: str, params: Any, many: bool, context: Any
    ) -> Any:
        words = sql.lstrip().split(None, 1)
        verb = words[0].upper() if words else ""
        if verb not in UNCOUNTED:
            connection = self.connection
            if not connection.in_atomic_block:
                self.count += 1
            elif not any(entry[1] == self._committed for entry in connection.run_on_commit):
                connection.on_commit(self._committed)
        return execute(sql, params, many, context)

    def _committed(self) -> None:
        self.count += 1
