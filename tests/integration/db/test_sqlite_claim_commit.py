"""On SQLite a claim that is a transaction of its own commits without waiting for the
disk (``synchronous=NORMAL`` around its statements, as PostgreSQL's claim turns
``synchronous_commit`` off), and nothing else does: outcomes, step records and
enqueues still wait for it (the connection's own level, SQLite's default ``FULL``)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta

import pytest
from django.db import connection, transaction

from django_durable_jobs.db.claims import claim
from django_durable_jobs.engine.clock import FakeClock
from tests.testapp import jobs

pytestmark = [
    pytest.mark.sqlite(reason="the synchronous level is SQLite's"),
    pytest.mark.django_db(transaction=True),
]


@pytest.fixture
def statements() -> Iterator[list[str]]:
    """Every statement the test's connection sends, as SQLite runs it."""
    connection.ensure_connection()
    sent: list[str] = []
    connection.connection.set_trace_callback(sent.append)
    try:
        yield sent
    finally:
        connection.connection.set_trace_callback(None)


def level() -> int:
    with connection.cursor() as cursor:
        cursor.execute("PRAGMA synchronous")
        return int(cursor.fetchone()[0])


def lazy_part(sent: list[str]) -> list[str]:
    start = sent.index("PRAGMA synchronous=NORMAL")
    end = next(
        i for i, sql in enumerate(sent) if i > start and sql.startswith("PRAGMA synchronous=")
    )
    return sent[start + 1 : end]


def test_only_the_claim_commits_without_waiting_for_the_disk(
    statements: list[str], clock: FakeClock
) -> None:
    assert level() == 2  # FULL, SQLite's default: every commit waits for the disk
    jobs.noop.enqueue()
    taken = claim("w1", now=clock.now(), lease=timedelta(seconds=60))
    assert len(taken) == 1
    lazy = lazy_part(statements)
    writes = [sql for sql in lazy if sql.split()[0] in ("INSERT", "UPDATE", "DELETE")]
    assert len(writes) == 1 and writes[0].startswith('UPDATE "django_durable_jobs_jobrun"')
    assert "status\" = 'running'" in writes[0]
    assert statements[-1] == "PRAGMA synchronous=2"  # the connection's level again
    assert level() == 2
    assert statements.count("PRAGMA synchronous=NORMAL") == 1  # the claim's UPDATE only


def test_a_claim_inside_the_callers_transaction_leaves_the_level_alone(
    statements: list[str], clock: FakeClock
) -> None:
    jobs.noop.enqueue()
    with transaction.atomic():
        assert len(claim("w1", now=clock.now(), lease=timedelta(seconds=60))) == 1
    assert not any(sql.startswith("PRAGMA synchronous=") for sql in statements)


def test_a_connection_set_to_normal_already_is_left_as_it_is(
    statements: list[str], clock: FakeClock
) -> None:
    with connection.cursor() as cursor:
        cursor.execute("PRAGMA synchronous=NORMAL")
    try:
        jobs.noop.enqueue()
        assert len(claim("w1", now=clock.now(), lease=timedelta(seconds=60))) == 1
        assert [sql for sql in statements if sql.startswith("PRAGMA synchronous=")] == [
            "PRAGMA synchronous=NORMAL"  # the test's own
        ]
    finally:
        with connection.cursor() as cursor:
            cursor.execute("PRAGMA synchronous=FULL")
