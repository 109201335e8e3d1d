"""Concurrency limits and throttles: validation, keys, the claim, on the
fake clock; the interleaved-claimers race on PostgreSQL and MariaDB."""

from __future__ import annotations

import json
import threading
from datetime import timedelta
from io import StringIO
from typing import Any

import pytest
from django.core.management import call_command
from django.db import connections, transaction
from django.urls import reverse

from django_durable_jobs import Concurrency, Throttle, job
from django_durable_jobs.db.claims import claim, requeue_expired
from django_durable_jobs.db.flow import holds
from django_durable_jobs.definitions.registry import unregister
from django_durable_jobs.engine.clock import FakeClock
from django_durable_jobs.engine.timeouts import TimeGuard
from django_durable_jobs.models import JobRun, RunStatus
from django_durable_jobs.verbs import runs
from django_durable_jobs.worker.execution import execute
from tests.testapp import flow_jobs

pytestmark = pytest.mark.django_db
LEASE = timedelta(minutes=1)


# -- validation at decoration, keys at enqueue ------------------------------------------


@pytest.mark.parametrize(
    ("options", "words"),
    [
        ({"concurrency": Concurrency(2, key="customer")}, ["unit.bad", "'customer'", "order_id"]),
        ({"concurrency": 0}, ["concurrency", "0"]),
        ({"concurrency": Concurrency(0)}, ["concurrency", "0"]),
        ({"concurrency": "2"}, ["concurrency", "'2'"]),
        ({"throttle": Throttle(5, per="5 mins")}, ["5 mins"]),
        ({"throttle": Throttle(5, per=0)}, ["throttle", "zero"]),
        ({"throttle": Throttle(5, per="1s", key="ctx")}, ["'ctx'", "not a parameter"]),
        ({"throttle": 5}, ["Throttle"]),
    ],
)
def test_bad_limits_fail_at_decoration(options: dict[str, Any], words: list[str]) -> None:
    with pytest.raises((ValueError, TypeError)) as excinfo:

        @job(name="unit.bad", **options)
        def bad(ctx: Any, order_id: int) -> None: ...

    unregister("unit.bad")
    for word in words:
        assert word in str(excinfo.value)


def test_keys_are_computed_at_enqueue_and_stored() -> None:
    run = flow_jobs.per_customer.enqueue(customer_id=42)
    everyone = flow_jobs.global_limit.enqueue(1)
    region = flow_jobs.by_region.enqueue({"region": "eu-west", "name": "Zoë"})
    throttled = flow_jobs.throttled.enqueue(1)
    stored = {r.pk: r for r in JobRun.objects.all()}
    assert (stored[run.pk].concurrency_key, stored[run.pk].concurrency_limit) == ("42", 2)
    assert (stored[everyone.pk].concurrency_key, stored[everyone.pk].concurrency_limit) == ("", 2)
    assert stored[region.pk].concurrency_key == "eu-west"
    assert stored[throttled.pk].throttle_key == ""
    assert stored[throttled.pk].throttle_period == timedelta(seconds=1)
    assert stored[throttled.pk].concurrency_key is None


def test_a_key_function_must_return_text() -> None:
    with pytest.raises(TypeError, match=r"tests\.by_region.*returned 3"):
        flow_jobs.by_region.enqueue({"region": 3})
    assert not JobRun.objects.exists()


@pytest.mark.parametrize(("key", "says"), [("a\x00b", "NUL character"), ("r" * 256, "255 chars")])
def test_a_key_no_database_stores_is_refused_the_same_everywhere(key: str, says: str) -> None:
    """A NUL in a key was a DataError on PostgreSQL (the caller's transaction aborted)
    and stored as it was on MariaDB."""
    from django_durable_jobs import InvalidName
    from django_durable_jobs.definitions.registry import unregister

    @job(name="tests.odd_key", concurrency=Concurrency(1, key=lambda odd: key if odd else "k"))
    def odd_key(ctx: Any, odd: bool) -> None:
        return None

    try:
        with transaction.atomic():
            with pytest.raises(InvalidName, match=says):
                odd_key.enqueue(True)
            assert odd_key.enqueue(False).concurrency_key == "k"  # the transaction is usable
    finally:
        unregister("tests.odd_key")
    assert JobRun.objects.count() == 1


# -- concurrency in the claim ----------------------------------------------------------------


def finish(run: JobRun, clock: FakeClock) -> None:
    execute(run, clock=clock, owner=run.lease_owner, guard=TimeGuard(use_signals=False))


def test_concurrency_per_key_holds_the_rest_and_frees_a_slot(clock: FakeClock) -> None:
    first = []
    for _ in range(5):
        first.append(flow_jobs.per_customer.enqueue(42))
        clock.advance(timedelta(milliseconds=1))
    other = flow_jobs.per_customer.enqueue(7)
    taken = claim("w", now=clock.now(), lease=LEASE, limit=10)
    assert sorted(r.concurrency_key or "" for r in taken) == ["42", "42", "7"]
    assert {first[0].pk, first[1].pk} < {r.pk for r in taken}  # the oldest first
    held = JobRun.objects.filter(status=RunStatus.QUEUED)
    assert held.count() == 3 and set(held.values_list("wake_at", flat=True)) == {None}
    reason = holds.held_reason(held.first(), clock.now())  # type: ignore[arg-type]
    assert reason == "held by concurrency customer_id=42 (2/2 running)"
    assert claim("w", now=clock.now(), lease=LEASE, limit=10) == []
    # A run of key 42 finishes: exactly one held run of that key may go.
    finish(next(r for r in taken if r.concurrency_key == "42"), clock)
    [next_run] = claim("w", now=clock.now(), lease=LEASE, limit=10)
    assert next_run.concurrency_key == "42" and next_run.pk == first[2].pk  # in order
    assert other.pk in {r.pk for r in taken}


def test_a_global_limit_counts_every_run_of_the_job(clock: FakeClock) -> None:
    for n in range(4):
        flow_jobs.global_limit.enqueue(n)
    assert len(claim("w", now=clock.now(), lease=LEASE, limit=10)) == 2


def test_held_runs_do_not_block_other_jobs(clock: FakeClock) -> None:
    for _ in range(20):
        flow_jobs.per_customer.enqueue(42)
    plain = flow_jobs.retry_after.using(priority=-5).enqueue("body")  # worst priority
    claim("w", now=clock.now(), lease=LEASE, limit=2)
    [taken] = claim("w", now=clock.now(), lease=LEASE, limit=1)
    assert taken.pk == plain.pk


@pytest.mark.parametrize("limited_first", [True, False])
def test_priority_orders_limited_and_unlimited_runs_alike(
    clock: FakeClock, limited_first: bool
) -> None:
    high, low = (5, 0) if limited_first else (0, 5)
    limited = flow_jobs.per_customer.using(priority=high).enqueue(customer_id=1)
    plain = flow_jobs.retry_after.using(priority=low).enqueue("body")
    [first] = claim("w", now=clock.now(), lease=LEASE)
    [second] = claim("w", now=clock.now(), lease=LEASE)
    expected = [limited.pk, plain.pk] if limited_first else [plain.pk, limited.pk]
    assert [first.pk, second.pk] == expected


def test_a_suspended_run_does_not_hold_a_slot(clock: FakeClock) -> None:
    sleeping = flow_jobs.by_region.enqueue({"region": "eu"})
    clock.advance(timedelta(milliseconds=1))  # the fake clock stands still: order them
    second = flow_jobs.by_region.enqueue({"region": "eu"})
    [run] = claim("w", now=clock.now(), lease=LEASE)
    assert run.pk == sleeping.pk
    finish(run, clock)  # sleeps for a minute: its slot is free
    [run] = claim("w", now=clock.now(), lease=LEASE)
    assert run.pk == second.pk
    finish(run, clock)
    clock.advance(timedelta(minutes=1))
    woken = claim("w", now=clock.now(), lease=LEASE, limit=5)
    assert len(woken) == 1  # both woke; one slot


def test_a_dead_workers_slot_returns_after_its_lease(clock: FakeClock) -> None:
    dead = flow_jobs.one_per_key.enqueue("k")
    clock.advance(timedelta(milliseconds=1))
    waiting = flow_jobs.one_per_key.enqueue("k")
    claim("dead", now=clock.now(), lease=LEASE)
    assert claim("w", now=clock.now(), lease=LEASE) == []
    clock.advance(LEASE + timedelta(seconds=1))
    assert requeue_expired(now=clock.now()) == 1
    [again] = claim("w", now=clock.now(), lease=LEASE)
    assert again.pk == dead.pk and again.attempt == 2
    finish(again, clock)
    [after] = claim("w", now=clock.now(), lease=LEASE)
    assert after.pk == waiting.pk


def test_stranded_held_runs_are_let_go(clock: FakeClock) -> None:
    dead = flow_jobs.one_per_key.enqueue("k")
    clock.advance(timedelta(milliseconds=1))
    waiting = flow_jobs.one_per_key.enqueue("k")
    claim("dead", now=clock.now(), lease=LEASE)
    claim("w", now=clock.now(), lease=LEASE)  # holds `waiting`
    clock.advance(LEASE + timedelta(seconds=1))
    requeue_expired(now=clock.now())
    runs.cancel(dead.pk)  # the slot's run will never free it now
    assert claim("w", now=clock.now(), lease=LEASE) == []
    assert holds.unhold_stranded(now=clock.now()) == 1
    [taken] = claim("w", now=clock.now(), lease=LEASE)
    assert taken.pk == waiting.pk


def test_the_sweep_leaves_held_a_run_whose_slot_a_run_just_let_go_takes(clock: FakeClock) -> None:
    """The worker reads the time, reaps leases (on SQLite waiting for the write lock),
    then sweeps: a run that stopped meanwhile let the oldest held run go at a later
    time than the sweep's. The sweep must count that run as taking the freed slot, not
    let a second held run go (which logged "let 1 held run(s) go whose key had free
    slots" in normal use); the next held run goes when that slot frees."""
    flow_jobs.one_per_key.enqueue("k")
    [running] = claim("w", now=clock.now(), lease=LEASE)
    clock.advance(timedelta(milliseconds=1))
    next_run = flow_jobs.one_per_key.enqueue("k")
    clock.advance(timedelta(milliseconds=1))
    last = flow_jobs.one_per_key.enqueue("k")
    assert claim("w", now=clock.now(), lease=LEASE) == []  # both held
    swept_at = clock.now()  # the sweeping worker's loop reads the time
    clock.advance(timedelta(milliseconds=5))
    finish(running, clock)  # another worker: lets `next_run` go, at its own time
    assert holds.unhold_stranded(now=swept_at) == 0
    assert JobRun.objects.get(pk=last.pk).wake_at is None  # still held, not let go
    [taken] = claim("w", now=clock.now(), lease=LEASE)
    assert taken.pk == next_run.pk
    finish(taken, clock)  # the slot frees: the last held run goes with it
    [taken] = claim("w", now=clock.now(), lease=LEASE)
    assert taken.pk == last.pk


def test_a_run_cancelled_while_running_keeps_its_slot_until_stopped(clock: FakeClock) -> None:
    first = flow_jobs.one_per_key.enqueue("k")
    clock.advance(timedelta(milliseconds=1))
    flow_jobs.one_per_key.enqueue("k")
    [run] = claim("w", now=clock.now(), lease=LEASE)
    runs.cancel(first.pk)  # it still executes up to its next step
    assert claim("w2", now=clock.now(), lease=LEASE) == []
    finish(run, clock)  # the worker stops it: the slot frees
    assert len(claim("w2", now=clock.now(), lease=LEASE)) == 1


def test_jobs_show_says_why_a_run_is_held(clock: FakeClock, capsys: Any) -> None:
    for _ in range(2):
        flow_jobs.per_customer.enqueue(42)
        clock.advance(timedelta(milliseconds=1))
    held = flow_jobs.per_customer.enqueue(42)
    claim("w", now=clock.now(), lease=LEASE, limit=5)
    call_command("jobs", "show", str(held.pk))
    assert (
        "not starting: held by concurrency customer_id=42 (2/2 running)" in capsys.readouterr().out
    )
    call_command("jobs", "show", str(held.pk), "--json")
    shown = json.loads(capsys.readouterr().out)
    assert shown["not_starting"] == "held by concurrency customer_id=42 (2/2 running)"
    assert shown["concurrency_key"] == "42"
    running = JobRun.objects.filter(status=RunStatus.RUNNING).first()
    assert running is not None
    call_command("jobs", "show", str(running.pk), "--json")
    assert json.loads(capsys.readouterr().out)["not_starting"] is None


# -- held at enqueue ----------------------------------------------------------------------


def test_runs_enqueued_behind_taken_slots_are_held_at_enqueue(
    clock: FakeClock, django_capture_on_commit_callbacks: Any
) -> None:
    flow_jobs.one_per_key.enqueue("k")
    [running] = claim("w", now=clock.now(), lease=LEASE)
    clock.advance(timedelta(milliseconds=1))
    with django_capture_on_commit_callbacks(execute=True):
        behind = flow_jobs.one_per_key.enqueue("k")
        clock.advance(timedelta(milliseconds=1))  # the oldest held run: let go first
        free = flow_jobs.one_per_key.enqueue("other")
        many = flow_jobs.one_per_key.enqueue_many([("k",), ("ünï",), ("k",)])
    wake = dict(JobRun.objects.filter(status=RunStatus.QUEUED).values_list("id", "wake_at"))
    assert wake[behind.pk] is None and wake[many[0].pk] is None and wake[many[2].pk] is None
    free_wake = wake[free.pk]
    assert free_wake is not None and free_wake <= clock.now()
    assert wake[many[1].pk] is not None
    held = JobRun.objects.get(pk=behind.pk)
    assert holds.held_reason(held, clock.now()) == "held by concurrency key=k (1/1 running)"
    # Nothing was let go at the commit: the slot is still taken.
    assert {r.pk for r in claim("w", now=clock.now(), lease=LEASE, limit=10)} == {
        free.pk,
        many[1].pk,
    }
    finish(running, clock)  # its outcome lets the oldest held run go
    [taken] = claim("w", now=clock.now(), lease=LEASE, limit=10)
    assert taken.pk == behind.pk


def test_a_slot_freed_before_the_enqueue_commits_lets_its_held_run_go(
    clock: FakeClock, django_capture_on_commit_callbacks: Any
) -> None:
    flow_jobs.one_per_key.enqueue("k")
    [running] = claim("w", now=clock.now(), lease=LEASE)
    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        behind = flow_jobs.one_per_key.enqueue("k")
        assert JobRun.objects.get(pk=behind.pk).wake_at is None
        # A worker records the outcome without seeing `behind` (not committed yet), so
        # it lets no held run go.
        JobRun.objects.filter(pk=running.pk).update(
            status=RunStatus.SUCCEEDED, lease_owner="", lease_expires_at=None
        )
    assert len(callbacks) == 1
    assert JobRun.objects.get(pk=behind.pk).wake_at == clock.now()
    [taken] = claim("w", now=clock.now(), lease=LEASE)
    assert taken.pk == behind.pk


def test_a_run_scheduled_for_later_is_not_held_at_enqueue(clock: FakeClock) -> None:
    flow_jobs.one_per_key.enqueue("k")
    claim("w", now=clock.now(), lease=LEASE)
    later = flow_jobs.one_per_key.using(run_after="1m").enqueue("k")
    assert JobRun.objects.get(pk=later.pk).wake_at == clock.now() + timedelta(minutes=1)


# -- throttle -----------------------------------------------------------------------------


def test_throttle_delays_starts_beyond_the_period(clock: FakeClock) -> None:
    started = clock.now()
    for n in range(7):
        flow_jobs.throttled.enqueue(n)
    assert len(claim("w", now=clock.now(), lease=LEASE, limit=10)) == 5
    later = JobRun.objects.filter(status=RunStatus.QUEUED)
    assert set(later.values_list("wake_at", flat=True)) == {started + timedelta(seconds=1)}
    until = (started + timedelta(seconds=1)).strftime("%H:%M:%S")
    assert holds.held_reason(later.first(), clock.now()) == f"throttled until {until}"  # type: ignore[arg-type]
    clock.advance(timedelta(milliseconds=999))
    assert claim("w", now=clock.now(), lease=LEASE, limit=10) == []
    clock.advance(timedelta(milliseconds=1))
    assert len(claim("w", now=clock.now(), lease=LEASE, limit=10)) == 2


def throttled_run(clock: FakeClock) -> tuple[JobRun, str]:
    """A run the throttle (5 per second) holds back, and the time it may start."""
    started = clock.now()
    for n in range(6):
        flow_jobs.throttled.enqueue(n)
    assert len(claim("w", now=clock.now(), lease=LEASE, limit=10)) == 5
    held = JobRun.objects.get(status=RunStatus.QUEUED)
    return held, (started + timedelta(seconds=1)).strftime("%H:%M:%S")


def test_jobs_show_says_until_when_a_throttled_run_waits(clock: FakeClock) -> None:
    held, until = throttled_run(clock)
    out = StringIO()
    call_command("jobs", "show", str(held.pk), stdout=out)
    assert f"not starting: throttled until {until}" in out.getvalue().splitlines()


def test_the_admin_run_page_says_until_when_a_throttled_run_waits(
    clock: FakeClock, admin_client: Any
) -> None:
    held, until = throttled_run(clock)
    page = admin_client.get(reverse("admin:django_durable_jobs_jobrun_change", args=[held.pk]))
    assert page.status_code == 200
    assert f"<dt>not starting</dt><dd>throttled until {until}</dd>" in page.content.decode()


# -- two claimers at once ------------------------------------------------------------------


@pytest.mark.postgres(reason="SQLite has one writer; the race needs row locks")
@pytest.mark.mariadb
@pytest.mark.django_db(transaction=True)
def test_interleaved_claimers_never_exceed_a_limit(clock: FakeClock) -> None:
    for _ in range(6):
        flow_jobs.one_per_key.enqueue("k")
    barrier = threading.Barrier(4)
    taken: list[JobRun] = []

    def claimer(name: str) -> None:
        try:
            barrier.wait(timeout=10)
            taken.extend(claim(name, now=clock.now(), lease=LEASE, limit=3))
        finally:
            connections.close_all()

    threads = [threading.Thread(target=claimer, args=(f"w{i}",)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert len(taken) == 1
    assert JobRun.objects.filter(status=RunStatus.RUNNING).count() == 1


@pytest.mark.postgres(reason="the advisory locks of db/postgresql/sql/schema.sql")
@pytest.mark.django_db(transaction=True)
@pytest.mark.psycopg3(reason="the PL/pgSQL flow claim is psycopg 3's")
def test_a_claim_leaves_a_key_another_worker_holds_to_it(clock: FakeClock) -> None:
    """A claimer that waited for a key another transaction holds could wait for a
    worker that waits for one of its own keys: it moves on to the other keys."""
    import psycopg

    busy = flow_jobs.one_per_key.enqueue("busy")
    free = flow_jobs.one_per_key.enqueue("free")
    connection = connections["default"]
    with connection.cursor() as cursor:
        cursor.execute("SET lock_timeout = '5s'")  # a wait for the lock raises
    params = connection.get_connection_params()
    other = psycopg.connect(**{k: v for k, v in params.items() if k != "cursor_factory"})
    try:
        with other.transaction():
            other.execute("SELECT durable_flow_lock(%s, 'concurrency', 'busy')", [busy.job_name])
            taken = claim("w1", now=clock.now(), lease=LEASE, limit=5)
            assert [run.pk for run in taken] == [free.pk]
        taken = claim("w2", now=clock.now(), lease=LEASE, limit=5)  # the key is free now
        assert [run.pk for run in taken] == [busy.pk]
    finally:
        other.close()
        with connection.cursor() as cursor:
            cursor.execute("SET lock_timeout = 0")


def test_the_admin_run_page_says_why_a_run_is_held(clock: FakeClock, admin_client: Any) -> None:
    for _ in range(2):
        flow_jobs.per_customer.enqueue(42)
        clock.advance(timedelta(milliseconds=1))
    held = flow_jobs.per_customer.enqueue(42)
    claim("w", now=clock.now(), lease=LEASE, limit=5)
    page = admin_client.get(reverse("admin:django_durable_jobs_jobrun_change", args=[held.pk]))
    text = page.content.decode()
    assert "not starting" in text.lower()
    assert "held by concurrency customer_id=42 (2/2 running)" in text
