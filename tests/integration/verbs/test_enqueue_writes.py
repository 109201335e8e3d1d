"""What ``enqueue`` and ``enqueue_many`` send and store: one statement a run enqueued
one by one, and a bulk insert (PostgreSQL: one JSON array a batch) that stores exactly
what ``enqueue`` stores, refuses exactly what it refuses, and cuts large batches."""

from __future__ import annotations

from datetime import timedelta
from itertools import pairwise
from typing import Any

import pytest
from django.db import IntegrityError, connection, transaction
from django.test.utils import CaptureQueriesContext

from django_durable_jobs.db import dialect  # noqa: F401 - named by the skipif conditions
from django_durable_jobs.db.postgresql import inserts as postgres_inserts
from django_durable_jobs.definitions.registry import JobOptions
from django_durable_jobs.exceptions import InvalidPayload, PayloadTooLarge
from django_durable_jobs.models import JobRun
from django_durable_jobs.verbs import enqueue
from tests.testapp import input_jobs, jobs

pytestmark = pytest.mark.django_db

#: One argument of a megabyte's order, under the default MAX_PAYLOAD_BYTES (1,000,000),
#: non-ASCII (2 bytes a character) and with characters JSON escapes.
LARGE = 'é"\\\n' * 90_000 + "ü" * 100_000

#: Calls as callers write them: tuples and dicts, unicode, nested values, a tuple
#: (stored as a list), a non-string key (stored as a string), the large argument.
CALLS: list[Any] = [
    (1,),
    {"value": "ünïcødé ✓ 🎉"},
    ({"nested": [1, 2.5, None, True, {"deep": ["€"]}]},),
    {"value": (1, 2)},
    ({1: "one", "two": 2},),
    (LARGE,),
    {"value": None},
    ("quote ' and \" and \\ and \x01",),
]


def stored(runs: list[JobRun]) -> list[tuple[Any, Any]]:
    by_id = {r.pk: r for r in JobRun.objects.filter(pk__in=[run.pk for run in runs])}
    return [(by_id[run.pk].args, by_id[run.pk].kwargs) for run in runs]


def one_by_one(calls: list[Any]) -> list[JobRun]:
    return [
        input_jobs.echo.enqueue(**call)
        if isinstance(call, dict)
        else input_jobs.echo.enqueue(*call)
        for call in calls
    ]


def test_one_enqueue_sends_one_statement() -> None:
    """A run without an idempotency key or limits is one INSERT (PostgreSQL: prepared
    from a connection's second run on); nothing else is read or written. With the
    doorbell (MariaDB) one UPDATE follows the commit, which this test never reaches."""
    jobs.add.enqueue(1, 2)
    jobs.add.enqueue(1, 2)  # PostgreSQL: this one prepares the statement
    with CaptureQueriesContext(connection) as queries:
        for n in range(5):
            jobs.add.enqueue(n, n)
    assert len(queries) == 5, [q["sql"][:80] for q in queries]


def test_an_enqueue_with_an_idempotency_key_sends_two_statements() -> None:
    """The INSERT that the key's unique constraint may refuse, then the key's run."""
    with CaptureQueriesContext(connection) as queries:
        first = jobs.add.using(idempotency_key="k-1").enqueue(1, 2)
    again = jobs.add.using(idempotency_key="k-1").enqueue(1, 2)
    assert len(queries) == 2 and again.pk == first.pk


def test_enqueue_many_stores_what_enqueue_stores() -> None:
    """Unicode, escapes, nesting, a tuple, a non-string key and a large argument are
    stored by ``enqueue_many`` as ``enqueue`` stores them, and the runs it returns hold
    the stored form."""
    expected = stored(one_by_one(CALLS))
    runs = input_jobs.echo.enqueue_many(CALLS)
    assert stored(runs) == expected
    assert [(run.args, run.kwargs) for run in runs] == expected
    assert expected[3] == ([], {"value": [1, 2]}) and expected[4] == ([{"1": "one", "two": 2}], {})
    assert expected[5] == ([LARGE], {})


def test_enqueue_many_writes_the_ids_and_wake_times_it_returns() -> None:
    """The returned runs are the rows written: same ids, wake times a microsecond
    apart in the order of the calls (workers take them in that order)."""
    runs = jobs.add.enqueue_many([(n, n) for n in range(5)])
    rows = JobRun.objects.in_bulk([run.pk for run in runs])
    assert [rows[run.pk].wake_at for run in runs] == [run.wake_at for run in runs]
    wakes = [run.wake_at for run in runs if run.wake_at is not None]
    gaps = {later - earlier for earlier, later in pairwise(wakes)}
    assert gaps == {timedelta(microseconds=1)} and len(wakes) == 5
    assert [rows[run.pk].args for run in runs] == [[n, n] for n in range(5)]


@pytest.mark.parametrize(
    "value",
    ["a\ud800", "nul \x00", float("nan"), {1, 2}, object(), input_jobs.nested(5000)],
    ids=["surrogate", "nul", "nan", "set", "object", "deep"],
)
def test_enqueue_many_refuses_what_enqueue_refuses_with_the_same_message(value: Any) -> None:
    with pytest.raises(InvalidPayload) as one:
        input_jobs.echo.enqueue(value)
    with pytest.raises(InvalidPayload) as many:
        input_jobs.echo.enqueue_many([(1,), (value,)])
    assert str(many.value) == str(one.value).replace(": argument", ": call 1: argument")
    assert not JobRun.objects.exists()


def test_arguments_over_the_limit_together_are_refused(settings: Any) -> None:
    """The limit holds for a call's arguments together, as ``[args, kwargs]``: 10 bytes
    for ``(123,)`` (``[[123],{}]``), at the limit; 11 for ``(1234,)``."""
    settings.DURABLE_JOBS = {"MAX_PAYLOAD_BYTES": 10}
    assert input_jobs.echo.enqueue_many([(123,)])[0].args == [123]
    assert input_jobs.echo.enqueue(123).args == [123]
    with pytest.raises(PayloadTooLarge, match="11 bytes, over the limit of 10"):
        input_jobs.echo.enqueue_many([(1234,)])
    with pytest.raises(PayloadTooLarge, match="11 bytes, over the limit of 10"):
        input_jobs.echo.enqueue(1234)
    with pytest.raises(PayloadTooLarge, match="over the limit of 10"):
        input_jobs.echo.enqueue(value=1)  # [[],{"value":1}]


@pytest.mark.skipif(
    "not dialect.of('default').fused", reason="the JSON array insert is PostgreSQL's"
)
def test_a_batch_of_large_arguments_is_cut_before_batch_size(monkeypatch: Any) -> None:
    """About ``BATCH_BYTES`` of JSON a statement: here 3 runs of ~150 bytes each."""
    monkeypatch.setattr(postgres_inserts, "BATCH_BYTES", 400)
    calls = [("x" * 100 + str(n),) for n in range(7)]
    with CaptureQueriesContext(connection) as queries:
        runs = input_jobs.echo.enqueue_many(calls)
    inserts = [q for q in queries if q["sql"].startswith("INSERT")]
    assert len(inserts) == 3  # 3 + 3 + 1
    assert stored(runs) == [([call[0]], {}) for call in calls]


@pytest.mark.skipif(
    "not dialect.of('default').fused", reason="the JSON array insert is PostgreSQL's"
)
def test_enqueue_many_sends_one_statement_a_batch() -> None:
    with CaptureQueriesContext(connection) as queries:
        jobs.add.enqueue_many([(n, n) for n in range(2500)])
    statements = [q["sql"].split()[0] for q in queries]
    # batches of 1000: 1000 + 1000 + 500, in a savepoint of the test's transaction
    assert statements == ["SAVEPOINT", "INSERT", "INSERT", "INSERT", "RELEASE"]
    assert JobRun.objects.count() == 2500


@pytest.mark.django_db(transaction=True)
def test_enqueue_many_writes_every_batch_or_none(monkeypatch: Any) -> None:
    """Outside a transaction too: a batch the database refuses (here its last run has
    the id of the first batch's first run) takes the batches before it with it, and
    the error is Django's, as a statement's; so does a call refused in a later batch."""
    calls = [(n, n) for n in range(5)]
    first = enqueue.new_ids(2)
    monkeypatch.setattr(
        enqueue, "new_ids", lambda count: first[:count] if count == 2 else [first[0]]
    )
    with pytest.raises(IntegrityError):
        enqueue.enqueue_many_job(jobs.add, calls, JobOptions(), batch_size=2)
    assert not JobRun.objects.exists()
    monkeypatch.undo()
    with pytest.raises(InvalidPayload, match="call 4: "):
        enqueue.enqueue_many_job(jobs.add, [*calls[:4], (1, {2})], JobOptions(), batch_size=2)
    assert not JobRun.objects.exists()
    runs = enqueue.enqueue_many_job(jobs.add, calls, JobOptions(), batch_size=2)
    assert sorted(JobRun.objects.values_list("args", flat=True)) == [[n, n] for n in range(5)]
    assert len(runs) == 5


@pytest.mark.django_db(transaction=True)
def test_a_refused_enqueue_many_leaves_the_callers_transaction_usable() -> None:
    """A refused call rolls back the batches written before it to a savepoint: the
    caller who catches the error goes on in its transaction."""
    with transaction.atomic():
        jobs.add.enqueue(0, 0)
        calls: list[Any] = [(n, n) for n in range(1, 2500)]
        with pytest.raises(InvalidPayload, match="call 2499: "):
            jobs.add.enqueue_many([*calls, (1, float("nan"))])
        jobs.add.enqueue(9, 9)
    assert sorted(JobRun.objects.values_list("args", flat=True)) == [[0, 0], [9, 9]]


@pytest.mark.parametrize(
    ("call", "refused"),
    [((1,), "missing a required argument: 'b'"), ((1, 2, 3), "too many positional")],
)
def test_a_call_that_bound_lets_no_other_shape_through(call: tuple[int, ...], refused: str) -> None:
    """``check_arguments`` remembers the shapes (positional count, keyword names) that
    bound: the same shape with other values passes, any other shape is bound again."""
    jobs.add.enqueue(1, 2)
    jobs.add.enqueue(a=1, b=2)
    assert jobs.add.enqueue("other", "values").args == ["other", "values"]
    with pytest.raises(InvalidPayload, match=refused):
        jobs.add.enqueue(*call)
    with pytest.raises(InvalidPayload, match="unexpected keyword argument 'c'"):
        jobs.add.enqueue(a=1, c=2)
    with pytest.raises(InvalidPayload, match="call 1: missing a required argument: 'b'"):
        jobs.add.enqueue_many([(1, 2), {"a": 1}])
