"""``EventWatch``: the events committed since an idle worker last looked, where no
NOTIFY names them (MariaDB/MySQL's doorbell waker asks it). Ids are taken at INSERT
and become visible at COMMIT, so an event can commit after a later one: the watch
must still return it once, after its commit."""

from __future__ import annotations

import contextlib
import threading

import pytest
from django.db import connection, connections, transaction

from django_durable_jobs import publish_event
from django_durable_jobs.db import event_watch
from django_durable_jobs.db.event_watch import HOLE_HORIZON, EventWatch

pytestmark = pytest.mark.django_db(transaction=True)

servers = [
    pytest.mark.postgres(reason="another transaction holds an id while a later one commits"),
    pytest.mark.mariadb,
]


def publish(key: str) -> int:
    return int(publish_event("keyed", None, key=key).id)


class OpenPublisher:
    """An event published on a second connection (a thread), its transaction open
    until ``end``: committed, or rolled back."""

    def __init__(self) -> None:
        self._published, self._end = threading.Event(), threading.Event()
        self._commit = True
        self.id = 0
        self._thread = threading.Thread(target=self._run)
        self._thread.start()
        assert self._published.wait(30), "the second connection did not publish"

    def _run(self) -> None:
        try:
            with contextlib.suppress(RuntimeError), transaction.atomic():
                self.id = publish("open")
                self._published.set()
                self._end.wait(30)
                if not self._commit:
                    raise RuntimeError("rolled back")
        finally:
            self._published.set()
            connections.close_all()

    def end(self, *, commit: bool = True) -> None:
        self._commit = commit
        self._end.set()
        self._thread.join(30)
        assert not self._thread.is_alive()


def test_a_look_returns_each_event_committed_since_the_last_look_once() -> None:
    publish("before")  # committed before the watch began: not heard of
    watch = EventWatch("default", now=0.0)
    assert watch.look(now=1.0) == []
    first, second = publish("a"), publish("b")
    assert watch.look(now=2.0) == [first, second]
    assert watch.look(now=3.0) == []
    third = publish("c")
    assert watch.look(now=4.0) == [third]


@servers[0]
@servers[1]
def test_an_event_that_commits_after_a_later_one_is_returned_after_its_commit() -> None:
    watch = EventWatch("default", now=0.0)
    early = OpenPublisher()  # the smaller id, committed last
    later = publish("later")
    assert early.id < later
    assert watch.look(now=1.0) == [later]
    assert watch.look(now=2.0) == []  # still open: nothing to say
    early.end()
    assert watch.look(now=3.0) == [early.id]
    assert watch.look(now=4.0) == []


@servers[0]
@servers[1]
def test_a_publisher_open_when_the_worker_starts_is_heard_of_when_it_commits() -> None:
    publish("older")
    early = OpenPublisher()
    later = publish("later")
    watch = EventWatch("default", now=0.0)  # the worker starts
    assert watch.look(now=1.0) == []
    early.end()
    assert watch.look(now=2.0) == [early.id]
    assert watch.top == later


@servers[0]
@servers[1]
def test_the_hole_a_rolled_back_publish_leaves_is_forgotten_after_the_horizon() -> None:
    watch = EventWatch("default", now=0.0)
    rolled_back = OpenPublisher()
    later = publish("later")
    rolled_back.end(commit=False)
    assert watch.look(now=1.0) == [later]
    assert rolled_back.id in watch.holes  # it may still commit: looked for
    assert watch.look(now=1.0 + HOLE_HORIZON) == []
    assert watch.holes == {}


def test_a_worker_busy_while_more_were_published_than_a_look_returns_hears_of_the_newest(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(event_watch, "LOOK_LIMIT", 3)
    watch = EventWatch("default", now=0.0)
    ids = [publish(f"k{i}") for i in range(5)]
    assert watch.look(now=1.0) == ids[-3:]
    assert watch.holes == {}  # the two older ones are let go, not taken for holes
    newest = publish("next")
    assert watch.look(now=2.0) == [newest]


@pytest.mark.mariadb(reason="TRUNCATE sets MariaDB's id counter back")
def test_after_the_events_table_is_truncated_the_new_events_are_heard_of() -> None:
    watch = EventWatch("default", now=0.0)
    for key in "abc":
        publish(key)
    assert len(watch.look(now=1.0)) == 3
    with connection.cursor() as cursor:
        cursor.execute("TRUNCATE TABLE django_durable_jobs_event")
    assert watch.look(now=2.0) == []
    first = publish("again")
    assert first == 1
    assert watch.look(now=3.0) == [first]
