"""The worker's database connections between runs: kept while they work, dropped
when they broke.

Django closes a connection at the end of each request once it is older than
``CONN_MAX_AGE`` (0 by default: after every request). A worker is not a request: a
default project would reconnect after every run, and pay for it (about five times
fewer no-op runs per second on PostgreSQL). So the worker keeps the jobs database's
connection for as long as it is healthy, whatever ``CONN_MAX_AGE`` says, and applies
Django's own rule to the other databases job code uses.
"""

from __future__ import annotations

from django.db import close_old_connections, connections


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
