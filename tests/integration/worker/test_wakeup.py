"""How an idle worker hears of new work (``worker/wakeup.py``, ``db/doorbell.py``):
LISTEN on PostgreSQL, ``PRAGMA data_version`` on SQLite, the doorbell row on MariaDB.
Each waker is real, on its own connection, woken by commits of the test's."""

from __future__ import annotations

import contextlib

import pytest
from django.db import connection, transaction

from django_durable_jobs.db import dialect
from django_durable_jobs.models import Doorbell
from django_durable_jobs.worker.wakeup import Waker, make_waker
from tests.testapp.event_jobs import waiter

pytestmark = pytest.mark.django_db(transaction=True)

#: Generous: a wait that returns True returned at the first look after the commit.
WOKEN_WITHIN = 10.0


def rung() -> int:
    return Doorbell.objects.filter(pk=1).values_list("rung", flat=True).first() or 0


@pytest.mark.psycopg3(reason="LISTEN is psycopg 3's: through psycopg2 an idle worker polls")
def test_each_database_wakes_its_idle_workers_its_own_way(waker: Waker) -> None:
    wanted = {"postgresql": "listen/notify", "mysql": "doorbell", "sqlite": "data_version"}
    assert waker.mode == wanted[connection.vendor]


@pytest.mark.psycopg3(reason="LISTEN is psycopg 3's: through psycopg2 an idle worker polls")
def test_an_enqueue_wakes_an_idle_worker_and_silence_does_not(waker: Waker) -> None:
    assert not waker.wait(0.1)
    waiter.enqueue("k")
    assert waker.wait(WOKEN_WITHIN)
    assert not waker.wait(0.1)  # the change was taken: no second wake for it


@pytest.mark.sqlite
@pytest.mark.mariadb(reason="PostgreSQL's LISTEN hears what is sent while it listens")
def test_a_commit_between_the_last_look_and_the_wait_still_wakes() -> None:
    waker = make_waker()  # reads the counter now, as the worker does before its first claim
    try:
        waiter.enqueue("k")  # committed before the worker waits
        assert waker.wait(WOKEN_WITHIN)
    finally:
        waker.close()


@pytest.mark.mariadb(reason="the doorbell is MariaDB's and MySQL's")
def test_the_doorbell_rings_once_per_commit_and_not_for_a_rollback() -> None:
    before = rung()
    waiter.enqueue("a")
    assert rung() == before + 1  # autocommit: after the INSERT's own commit
    with transaction.atomic():
        for key in "bcd":
            waiter.enqueue(key)
        assert rung() == before + 1  # not before the commit
    assert rung() == before + 2  # one ring for the transaction
    with contextlib.suppress(RuntimeError), transaction.atomic():
        waiter.enqueue("e")
        raise RuntimeError("rolled back: the enqueue and its ring undone")
    assert rung() == before + 2


@pytest.mark.mariadb(reason="the doorbell is MariaDB's and MySQL's")
def test_the_doorbell_row_is_made_again_after_a_flush() -> None:
    Doorbell.objects.all().delete()
    waiter.enqueue("a")
    assert rung() == 1


@pytest.mark.postgres
@pytest.mark.sqlite
def test_no_doorbell_where_workers_hear_otherwise() -> None:
    assert dialect.of("default").wake_by != "doorbell"
    before = rung()
    waiter.enqueue("a")
    assert rung() == before


@pytest.mark.mariadb(reason="the doorbell is MariaDB's and MySQL's")
def test_the_doorbell_is_a_memory_table_whose_ring_is_not_flushed_to_disk() -> None:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT engine FROM information_schema.tables "
            "WHERE table_schema = DATABASE() AND table_name = %s",
            [Doorbell._meta.db_table],
        )
        assert cursor.fetchone()[0].upper() == "MEMORY"
