"""Writing a run's outcome when things go wrong, in-process on real databases: an
outcome write that meets a cut connection, error texts no database stores, job code
that raises SystemExit or KeyboardInterrupt, connections kept whatever CONN_MAX_AGE
says."""

from __future__ import annotations

import os
import signal
import threading
from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest
from django.db import connection, connections
from django.db.backends.signals import connection_created

from django_durable_jobs.engine.clock import FakeClock
from django_durable_jobs.models import JobRun, RunStatus, StepRecord, StepStatus
from django_durable_jobs.worker.loop import Worker, WorkerOptions
from tests.testapp import flow_jobs, hostile_jobs, jobs
from tests.testapp.models import Effect


def worker(clock: FakeClock, **options: Any) -> Worker:
    return Worker(WorkerOptions(worker_id="w-outcomes", burst=True, **options), clock=clock)


# -- the outcome write meets a terminated backend ------------------------------


@pytest.mark.postgres(reason="terminating a server backend needs PostgreSQL or MariaDB")
@pytest.mark.mariadb
@pytest.mark.parametrize(
    ("conn_max_age", "refuse_for"),
    [(None, 0), (0, 0), (0, 0.5)],
    ids=["persistent-terminated", "max-age-0-terminated", "max-age-0-refused"],
)
@pytest.mark.django_db(transaction=True)
def test_outcome_survives_a_terminated_backend_at_its_write(
    clock: FakeClock, monkeypatch: pytest.MonkeyPatch, conn_max_age: int | None, refuse_for: float
) -> None:
    monkeypatch.setitem(connection.settings_dict, "CONN_MAX_AGE", conn_max_age)
    connection.close()
    run = hostile_jobs.cut_connection.enqueue(refuse_for)
    clock.advance("1s")  # claimed in this order
    after = jobs.noop.enqueue()
    assert worker(clock).run() == 2
    run.refresh_from_db()
    # Before: the retry fenced the outcome with the next owner and was refused; the
    # succeeded run sat "running" until its lease ran out and then burned an attempt.
    assert (run.status, run.result, run.attempt) == (RunStatus.SUCCEEDED, "done", 1)
    assert (run.lease_owner, run.lease_expires_at) == ("", None)
    assert JobRun.objects.get(pk=after.pk).status == RunStatus.SUCCEEDED
    assert Effect.objects.filter(name="work").count() == 1


@pytest.mark.postgres(reason="terminating a server backend needs PostgreSQL or MariaDB")
@pytest.mark.mariadb
@pytest.mark.django_db(transaction=True)
def test_a_limited_runs_outcome_survives_a_terminated_backend_and_frees_its_slot(
    clock: FakeClock,
) -> None:
    """Flow's outcome (written alone, slot freed under the key's lock) meets the cut
    connection that the owner fencing was built for."""
    first = hostile_jobs.cut_connection_limited.enqueue()
    clock.advance("1s")
    second = hostile_jobs.cut_connection_limited.enqueue()  # held until the first frees
    assert worker(clock).run() == 2
    for run in (first, second):
        run.refresh_from_db()
        assert (run.status, run.result, run.attempt) == (RunStatus.SUCCEEDED, "done", 1)
        assert (run.lease_owner, run.lease_expires_at) == ("", None)
    assert Effect.objects.filter(name="work").count() == 2


@pytest.mark.postgres(reason="only PostgreSQL claims limited runs before writing the outcome")
@pytest.mark.django_db(transaction=True)
def test_runs_claimed_before_an_outcome_that_fails_to_write_are_given_back(
    clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    from django.db import OperationalError

    from django_durable_jobs.worker import outbox, recording

    plain = jobs.noop.enqueue()
    clock.advance("1s")  # claimed in this order
    limited = flow_jobs.one_per_key.enqueue("k")
    w = worker(clock)
    assert w.run_once()  # executes the plain run; its outcome waits for the next claim
    original, calls = recording.record, []

    def cut_once(*args: Any, **kwargs: Any) -> Any:
        calls.append(args)
        if len(calls) == 1:
            raise OperationalError("connection cut while writing the outcome")
        return original(*args, **kwargs)

    monkeypatch.setattr(outbox, "record", cut_once)
    with pytest.raises(OperationalError):  # the loop's run() logs it and goes on
        w.run_once()  # claims the limited run, then the outcome's write fails
    limited.refresh_from_db()
    # Before: the limited run stayed leased, unexecuted, until its lease ran out, and
    # then lost an attempt.
    assert (limited.status, limited.attempt, limited.lease_owner) == (RunStatus.QUEUED, 0, "")
    assert w.run() >= 1
    w.flush()
    for run in (plain, limited):
        run.refresh_from_db()
        assert (run.status, run.attempt) == (RunStatus.SUCCEEDED, 1)


# -- error texts a database cannot store --------------------------------------


@pytest.mark.parametrize("where", ["job", "step"])
@pytest.mark.django_db(transaction=True)
def test_a_nul_or_a_lone_surrogate_in_an_error_is_stored_escaped(
    clock: FakeClock, where: str
) -> None:
    failing = hostile_jobs.unstorable_error.enqueue(where)
    clock.advance("1s")  # claimed in this order
    after = jobs.noop.enqueue()
    w = worker(clock)
    assert w.run_once()  # executes the failing run
    assert w.run_once()  # records its outcome with the next claim, executes the next run
    w.flush()
    failing.refresh_from_db()
    assert failing.status == RunStatus.FAILED and failing.error_type == "builtins.ValueError"
    assert failing.error == "bad \\x00 byte and \\ud800 half"
    assert "bad \\x00 byte and \\ud800 half" in failing.traceback
    assert JobRun.objects.get(pk=after.pk).status == RunStatus.SUCCEEDED
    if where == "step":
        step = StepRecord.objects.get(run=failing, name="explode")
        assert step.status == StepStatus.FAILED and step.error == failing.error


@pytest.mark.django_db(transaction=True)
def test_an_outcome_the_database_refuses_is_recorded_in_short_and_the_worker_moves_on(
    clock: FakeClock,
) -> None:
    failing = hostile_jobs.unstorable_error.enqueue("job")
    clock.advance("1s")  # claimed in this order
    after = jobs.noop.enqueue()
    w = worker(clock)
    assert w.run_once()
    # What no escaping foresaw: texts the database refuses (built here around the
    # escaping; a NUL is refused by PostgreSQL, a lone surrogate by every driver).
    held = w._pending
    assert held is not None
    bad = {"error": "refused \x00 \udcff", "traceback": "\udcff" * 10, "error_type": "x\udcff"}
    w._pending = replace(held, changes={**held.changes, **bad})
    assert w.run_once()  # before: DataError / UnicodeEncodeError, the same write forever
    assert w.run_once()  # the short outcome with the next claim; the next run executes
    w.flush()
    failing.refresh_from_db()
    assert failing.status == RunStatus.FAILED and failing.attempt == 1
    assert failing.error.startswith("refused \\x00 \\udcff [recorded in short: ")
    assert failing.error_type == "x\\udcff" and failing.traceback == ""
    assert failing.error.isascii() and "\x00" not in failing.error
    assert (failing.lease_owner, failing.lease_expires_at) == ("", None)
    assert JobRun.objects.get(pk=after.pk).status == RunStatus.SUCCEEDED


@pytest.mark.postgres(reason="SQLite and MariaDB store any JSON text, escaped")
@pytest.mark.django_db(transaction=True)
def test_a_success_whose_result_is_refused_fails_instead_of_vanishing(clock: FakeClock) -> None:
    run = jobs.noop.enqueue()
    w = worker(clock)
    assert w.run_once()
    held = w._pending
    assert held is not None
    w._pending = replace(held, changes={**held.changes, "result": {"k": "\udcff"}})
    while w.run_once():
        pass
    w.flush()
    run.refresh_from_db()
    assert run.status == RunStatus.FAILED and run.error_code == "X_STEP_OUTPUT_INVALID"
    assert "the database refused the outcome" in run.error and run.result is None


# -- the worker keeps a healthy connection whatever CONN_MAX_AGE says ---------


@pytest.mark.django_db(transaction=True)
def test_with_conn_max_age_0_the_worker_keeps_its_connection_between_runs(
    clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(connection.settings_dict, "CONN_MAX_AGE", 0)  # Django's default
    for _ in range(5):
        jobs.noop.enqueue()
    connection.close()
    main = threading.get_ident()
    opened: list[str] = []

    def created(sender: Any, connection: Any, **kwargs: Any) -> None:
        # Not the idle worker's wake-up connection (worker/wakeup.py), which is its own
        # for the worker's life, outside Django's per-thread connections.
        if threading.get_ident() == main and connection is connections[connection.alias]:
            opened.append(connection.alias)

    connection_created.connect(created)
    try:
        assert worker(clock).run() == 5
    finally:
        connection_created.disconnect(created)
    # Before: one connection per run (Django's request rule applied to every run).
    assert opened == ["default"]
    assert JobRun.objects.filter(status=RunStatus.SUCCEEDED).count() == 5


# -- a retry records each step's start before its function runs ------------------


# -- a supervisor's death is signalled twice ------------------------------------


@pytest.mark.django_db(transaction=True)
def test_a_second_stop_signal_does_not_tear_the_release_of_the_run_in_hand(
    clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A child learns of its supervisor's death twice (PR_SET_PDEATHSIG, then the
    watcher a second later): the second SIGUSR2 arrives while the first one's release is
    being written. Before: it raised StopNow inside that write (on MariaDB the torn
    query left the connection "out of sync"), the worker died and the run stayed
    running until its lease ran out."""
    from django_durable_jobs.db.claims import release as real_release
    from django_durable_jobs.worker import give_back

    def release_signalled_again(*args: Any, **kwargs: Any) -> bool:
        os.kill(os.getpid(), signal.SIGUSR2)  # the watcher's signal, mid-release
        return real_release(*args, **kwargs)

    monkeypatch.setattr(give_back, "release", release_signalled_again)
    run = hostile_jobs.abandoned.enqueue()
    subject = worker(clock)
    saved = {signum: signal.getsignal(signum) for signum in _WORKER_SIGNALS}
    subject.install_signal_handlers()
    try:
        assert subject.run() == 0
    finally:
        for signum, handler in saved.items():
            signal.signal(signum, handler)
    run.refresh_from_db()
    # Given back as claimed: runnable again at once, no attempt used.
    assert (run.status, run.attempt, run.lease_owner) == (RunStatus.QUEUED, 0, "")
    assert Effect.objects.filter(name="stopping").count() == 1


@pytest.mark.django_db(transaction=True)
def test_a_release_that_fails_with_the_drivers_own_error_is_tried_again_afresh(
    clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A stop that tore a query on MariaDB left the connection "out of sync", and the
    release's statement then failed in Django's ``cursor.close()``, which raises the
    driver's error, not Django's: the worker child crashed with its run in hand, which
    stayed running until its lease ran out."""
    from django_durable_jobs.db.claims import claim
    from django_durable_jobs.db.claims import release as real_release
    from django_durable_jobs.worker import give_back

    tries: list[str] = []

    def torn_first(*args: Any, **kwargs: Any) -> bool:
        tries.append("release")
        if len(tries) == 1:
            driver = connection.Database  # type: ignore[attr-defined]  # the DB-API module
            raise driver.ProgrammingError("Commands out of sync")
        return real_release(*args, **kwargs)

    jobs.noop.enqueue()
    (run,) = claim("w-1", now=clock.now(), lease=timedelta(minutes=1), limit=1)
    monkeypatch.setattr(give_back, "release", torn_first)
    assert give_back.release_afresh(run, "w-1", clock) is True
    assert tries == ["release", "release"]
    run.refresh_from_db()
    assert (run.status, run.attempt, run.lease_owner) == (RunStatus.QUEUED, 0, "")


_WORKER_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1, signal.SIGUSR2)
