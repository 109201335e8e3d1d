"""The hand-written SQL is built from the models' ``_meta``: adding a column to
``JobRun`` or ``StepRecord`` takes one edit (the model and its migration).

The statements below are not compared with a second, hand-kept list: they are read
back and checked against ``_meta`` itself, and then run against the database.
"""

from __future__ import annotations

from datetime import timedelta, timezone
from typing import Any

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

from django_durable_jobs.db import dialect, store
from django_durable_jobs.db.postgresql import claims as postgres
from django_durable_jobs.db.postgresql import inserts as postgres_inserts
from django_durable_jobs.db.postgresql.flow import ARRAY_TYPES
from django_durable_jobs.db.postgresql.statements import binds_on_server
from django_durable_jobs.engine.clock import FakeClock
from django_durable_jobs.engine.records import RecordedStep, StepStatus
from django_durable_jobs.engine.vocabulary import StepKind
from django_durable_jobs.models import JobRun, RunStatus, StepRecord
from tests.testapp import jobs

pytestmark = pytest.mark.django_db

needs_postgres = pytest.mark.skipif(
    "not dialect.of('default').fused", reason="the prepared statements are PostgreSQL's"
)


def concrete(model: type[JobRun] | type[StepRecord]) -> list[str]:
    return [str(field.column) for field in model._meta.concrete_fields]


def test_a_step_row_is_written_column_by_column_from_one_mapping() -> None:
    record = RecordedStep(
        run_id="r", name="s", status=StepStatus.COMPLETED, started_at=FakeClock().now(), attempts=1
    )
    written = {"id", "run_id", "name", *store._columns(record)}
    assert written == set(concrete(StepRecord))


@needs_postgres
def test_the_bulk_insert_writes_every_run_column() -> None:
    sql, fields = postgres_inserts.insert_many_sql(connection)
    listed = sql.split("(", 1)[1].split(")", 1)[0]
    assert [name.strip().strip('"') for name in listed.split(",")] == concrete(JobRun)
    # The fields sent once; the id and the arguments come in each run's JSON element.
    per_run_names = ("id", "args", "kwargs")
    per_run = [
        str(field.column)
        for field in JobRun._meta.concrete_fields
        if field.attname in per_run_names
    ]
    assert sorted([*(field.column for field in fields), *per_run]) == sorted(concrete(JobRun))


@needs_postgres
@pytest.mark.parametrize("use_tz", [True, False], ids=["aware", "use_tz_false"])
def test_one_inserted_run_equals_a_run_saved_by_the_orm_as_text_and_prepared(
    use_tz: bool, settings: Any
) -> None:
    """``enqueue``'s INSERT (``postgres_inserts.insert_run``): a connection's first run
    goes as text (no PREPARE for a request that enqueues once), the next prepared; both
    write what ``save()`` writes. Values Django would pass unchanged are written into
    the run's JSON document as they are (``_document_fields``); the others here go
    through Django: a ``TextChoices`` member, a duration, and every datetime with
    ``USE_TZ = False`` (stored as local time)."""
    settings.USE_TZ, settings.TIME_ZONE = use_tz, "Europe/Paris"
    now = FakeClock().now()
    parent = jobs.add.enqueue(1, 2)

    def run() -> JobRun:
        return JobRun(
            job_name="tests.add",
            queue="emails ✉",
            priority=-3,
            status=RunStatus.QUEUED,
            args=["ünï", 1.5, None],
            kwargs={"k": {"nested": ["€", True]}},
            created_at=now,
            wake_at=now + timedelta(days=3),
            scheduled_at=now.astimezone(timezone(timedelta(hours=5, minutes=30))),
            parent_id=parent.pk,
            trace_context={"a": "b"},
            throttle_key="kéy",
            throttle_limit=3,
            throttle_period=timedelta(minutes=5),
        )

    saved, text, prepared = run(), run(), run()
    dialect.Dialect("default").insert_run(saved)  # the ORM: save(force_insert=True)
    postgres_inserts._INSERTED.pop(connection.connection, None)
    with CaptureQueriesContext(connection) as queries:
        postgres_inserts.insert_run("default", text)
        postgres_inserts.insert_run("default", prepared)
    sent = [q["sql"] for q in queries.captured_queries]
    # A cursor that binds on the server runs no EXECUTE (statements.prepare): text twice.
    second = "INSERT INTO" if binds_on_server(connection) else "EXECUTE "
    assert sent[0].startswith("INSERT INTO") and second in sent[-1]
    columns = [field.attname for field in JobRun._meta.concrete_fields if field.attname != "id"]
    rows = [JobRun.objects.filter(pk=r.pk).values(*columns).get() for r in (saved, text, prepared)]
    assert rows[0] == rows[1] == rows[2]
    assert rows[1]["args"] == ["ünï", 1.5, None] and rows[1]["queue"] == "emails ✉"
    assert rows[1]["scheduled_at"] == now and rows[1]["throttle_period"] == timedelta(minutes=5)


def test_the_values_sent_as_they_are_are_only_those_django_would_not_change() -> None:
    """``run_document`` skips ``get_db_prep_save`` for a str, int, UUID or aware
    datetime of a field ``_document_fields`` gives a kind: no such field may prepare
    its values itself, except ``InstantField``, whose conversion applies only with
    ``USE_TZ = False``, which ``run_document`` checks. A new field class with its own
    preparation fails here."""
    from django.db import models

    from django_durable_jobs.db.fields import InstantField

    bases = {models.CharField, models.TextField, models.UUIDField, models.DateTimeField}
    bases |= {models.IntegerField, models.PositiveIntegerField}
    fast = [f for f, _, _, kind in postgres_inserts._document_fields() if kind not in ("", "json")]
    for field in fast:
        own = {
            name
            for klass in type(field).__mro__
            if klass not in bases
            and klass is not InstantField
            and klass.__module__ != "django.db.models.fields"
            for name in ("get_prep_value", "get_db_prep_value", "get_db_prep_save", "to_python")
            if name in vars(klass)
        }
        assert own == set(), (field.name, own)
    assert {f.name for f in fast} >= {"id", "job_name", "created_at", "priority"}


@needs_postgres
def test_bulk_inserted_runs_equal_runs_saved_by_the_orm() -> None:
    [inserted] = jobs.add.enqueue_many([(1, 2)])
    saved = jobs.add.enqueue(1, 2)
    ignore = {"id", "created_at", "wake_at"}
    columns = [field.attname for field in JobRun._meta.concrete_fields]
    row = JobRun.objects.filter(pk=inserted.pk).values(*columns).get()
    expected = JobRun.objects.filter(pk=saved.pk).values(*columns).get()
    assert {k: v for k, v in row.items() if k not in ignore} == {
        k: v for k, v in expected.items() if k not in ignore
    }


@needs_postgres
def test_the_outcome_statement_writes_the_outcome_columns_with_their_types() -> None:
    sql, types = postgres._outcome_sql(connection, 6)
    for name in postgres.OUTCOME_COLUMNS:
        field = JobRun._meta.get_field(name)
        assert f'"{name}" = o."{name}"' in sql and name in concrete(JobRun)
        assert f'"{name}" {field.db_type(connection)}' in sql  # read from the document as
    assert types == ["json"]  # one document, whatever the number of outcomes


@needs_postgres
@pytest.mark.parametrize("use_tz", [True, False], ids=["aware", "use_tz_false"])
def test_outcomes_recorded_by_the_claim_equal_outcomes_saved_by_the_orm(
    use_tz: bool, settings: Any
) -> None:
    """The claim reads outcomes from one JSON document (``outcome_document``): what
    it stores is what ``save()`` stores, for the values people send (unicode, JSON
    inside JSON, a long traceback, a datetime in another offset, a ``TextChoices``
    member) and with ``USE_TZ = False`` (local time)."""
    settings.USE_TZ, settings.TIME_ZONE = use_tz, "Europe/Paris"
    now = FakeClock().now()
    india = timezone(timedelta(hours=5, minutes=30))
    outcomes: list[dict[str, Any]] = [
        {
            "status": RunStatus.SUCCEEDED,
            "result": {"ünï": ["€", 1.5, None, {"deep": '"quoted" \\ \n'}], "n": 10**18},
            "finished_at": now.astimezone(india),
            "wake_at": None,
            "error_code": "",
            "error": "",
            "error_type": "",
            "traceback": "",
        },
        {
            "status": RunStatus.FAILED,
            "result": "just a string",
            "finished_at": now,
            "wake_at": now + timedelta(days=3),
            "error_code": "X_STEP_FAILED",
            "error": "ça n'a pas marché ✗ 'quote' \"dq\"",
            "error_type": "builtins.ValueError",
            "traceback": "Traceback (most recent call last):\n" + "  line ✓\n" * 5000,
        },
        {
            "status": RunStatus.SLEEPING,
            "result": None,
            "finished_at": None,
            "wake_at": now.astimezone(india) + timedelta(hours=1),
            "error_code": "",
            "error": "",
            "error_type": "",
            "traceback": "",
        },
    ]
    by_claim = [jobs.add.enqueue(1, 2) for _ in outcomes]
    later = now + timedelta(days=30)
    JobRun.objects.filter(pk__in=[r.pk for r in by_claim]).update(wake_at=now)
    taken = postgres.claim("default", "w", later, timedelta(minutes=1), None, 10).runs
    assert {r.pk for r in taken} == {r.pk for r in by_claim}
    by_orm = [jobs.add.enqueue(1, 2) for _ in outcomes]
    for run, values in zip(by_orm, outcomes, strict=True):
        JobRun.objects.filter(pk=run.pk).update(**values)
    finishes = [
        postgres.Finish(run.pk, "w", values) for run, values in zip(by_claim, outcomes, strict=True)
    ]
    recorded = postgres.finish("default", finishes, later)
    assert recorded == {run.pk for run in by_claim}
    names = list(postgres.OUTCOME_COLUMNS)
    for orm, claimed in zip(by_orm, by_claim, strict=True):
        expected = JobRun.objects.filter(pk=orm.pk).values(*names).get()
        assert JobRun.objects.filter(pk=claimed.pk).values(*names).get() == expected


@needs_postgres
@pytest.mark.parametrize(
    "text",
    ["nul \x00 inside", "lone \ud800 surrogate", "x" * 201],
    ids=["nul", "surrogate", "long"],
)
def test_an_outcome_no_column_can_hold_is_refused_as_unstorable(text: str) -> None:
    """The worker writes such an outcome in short (``outcome.UNSTORABLE``): the
    document must fail the same way the arrays did, with a ``DataError`` or a
    ``ValueError``, and leave the run as it was."""
    from django_durable_jobs.worker.outcome import UNSTORABLE

    run = jobs.add.enqueue(1, 2)
    now = FakeClock().now() + timedelta(days=30)
    JobRun.objects.filter(pk=run.pk).update(wake_at=FakeClock().now())
    [taken] = postgres.claim("default", "w", now, timedelta(minutes=1), None, 1).runs
    values = {name: getattr(taken, name) for name in postgres.OUTCOME_COLUMNS}
    values.update(status=RunStatus.FAILED, finished_at=now, error_type=text)
    with pytest.raises(UNSTORABLE), transaction.atomic():
        postgres.finish("default", [postgres.Finish(taken.pk, "w", values)], now)
    taken.refresh_from_db()
    assert taken.status == RunStatus.RUNNING and taken.lease_owner == "w"


@needs_postgres
def test_the_claim_returns_every_run_column_and_records_an_outcome() -> None:
    first, second = jobs.add.enqueue(1, 2), jobs.add.enqueue(3, 4)
    assert first.wake_at is not None and second.wake_at is not None
    now = max(first.wake_at, second.wake_at) + timedelta(seconds=1)
    [taken] = postgres.claim("default", "w", now, timedelta(minutes=1), None, 1).runs
    fresh = JobRun.objects.get(pk=taken.pk)
    for column in concrete(JobRun):
        assert getattr(taken, column) == getattr(fresh, column), column
    values = {name: getattr(fresh, name) for name in postgres.OUTCOME_COLUMNS}
    values.update(status=RunStatus.SUCCEEDED, result={"sum": [3]}, finished_at=now)
    finish = postgres.Finish(taken.pk, "w", values)
    claimed = postgres.claim("default", "w", now, timedelta(minutes=1), None, 1, [finish])
    [other] = claimed.runs
    assert claimed.recorded == {taken.pk} and {taken.pk, other.pk} == {first.pk, second.pk}
    taken.refresh_from_db()
    assert taken.status == RunStatus.SUCCEEDED and taken.result == {"sum": [3]}
    assert taken.lease_owner == "" and taken.finished_at == now


@needs_postgres
def test_the_finish_function_takes_the_outcome_columns_in_order() -> None:
    # durable_finish_concurrency (db/postgresql/sql/schema.sql) lists the outcome's columns by hand,
    # in the order of db.postgres.outcome_arrays: a column added to OUTCOME_COLUMNS
    # must be added there too, with the type postgres_flow sends it as.
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT proargnames, proargtypes::regtype[]::text[] FROM pg_proc"
            " WHERE proname = 'durable_finish_concurrency'"
        )
        [(names, types)] = cursor.fetchall()
    columns = [f"p_{name}" for name in postgres.OUTCOME_COLUMNS]
    assert names == ["p_now", *columns, "p_ids", "p_owners", "p_jobs", "p_keys"]
    sent = [kind.replace("timestamptz", "timestamp with time zone") for kind in ARRAY_TYPES]
    assert types == ["timestamp with time zone", *sent]


@needs_postgres
def test_a_claimed_run_is_built_as_from_db_builds_it_and_sends_init_signals_when_listened() -> None:
    """``run_from_row`` sets the row's values on a new instance in one call when no
    ``pre_init``/``post_init`` receiver listens for ``JobRun``, and goes through
    ``Model.from_db`` (which sends them) when one does: either way the instance is
    the one Django would build."""
    from django.db.models.signals import post_init

    first, second = jobs.add.enqueue(1, 2), jobs.add.enqueue(3, 4)
    now = FakeClock().now() + timedelta(days=30)
    JobRun.objects.filter(pk__in=[first.pk, second.pk]).update(wake_at=FakeClock().now())
    [quick] = postgres.claim("default", "w", now, timedelta(minutes=1), None, 1).runs
    seen: list[Any] = []

    def listener(sender: Any, instance: JobRun, **kwargs: Any) -> None:
        seen.append(instance.pk)

    post_init.connect(listener, sender=JobRun)
    try:
        [signalled] = postgres.claim("default", "w", now, timedelta(minutes=1), None, 1).runs
    finally:
        post_init.disconnect(listener, sender=JobRun)
    assert seen == [signalled.pk]
    for built in (quick, signalled):
        loaded = JobRun.objects.get(pk=built.pk)
        assert not built._state.adding and built._state.db == "default"
        fields = {f.attname for f in JobRun._meta.concrete_fields}
        assert {k: v for k, v in vars(built).items() if k in fields} == {
            k: v for k, v in vars(loaded).items() if k in fields
        }
        assert set(vars(built)) - fields == {"_state", "claimed_from", "claimed_fresh"}
        built.status = RunStatus.SUCCEEDED
        built.save(update_fields=["status"])  # an ordinary model instance
        assert JobRun.objects.get(pk=built.pk).status == RunStatus.SUCCEEDED


@needs_postgres
@pytest.mark.parametrize("use_tz", [True, False], ids=["aware", "use_tz_false"])
@pytest.mark.parametrize("prepared", [True, False], ids=["prepared", "pgbouncer"])
def test_a_fenced_step_write_stores_what_the_orm_stores(
    use_tz: bool, prepared: bool, settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The worker's fenced step INSERT sends its values as they are where Django would
    not change them, JSON as text (``prepared_params``: the prepared statement's
    parameters have types), and through Django when it cannot prepare (a transaction
    pooler): either way the row is the ORM's, for unicode, JSON in JSON, a time in
    another offset, and ``USE_TZ = False``."""
    settings.USE_TZ, settings.TIME_ZONE = use_tz, "Europe/Paris"
    if not prepared:
        monkeypatch.setitem(connection.settings_dict, "DISABLE_SERVER_SIDE_CURSORS", True)
    india = timezone(timedelta(hours=5, minutes=30))
    now = FakeClock().now()
    owner = "w ✓"
    runs = [jobs.add.enqueue(1, 2) for _ in range(2)]
    JobRun.objects.filter(pk__in=[r.pk for r in runs]).update(
        status=RunStatus.RUNNING, lease_owner=owner
    )

    def step(run: JobRun) -> RecordedStep:
        return RecordedStep(
            run_id=str(run.pk),
            name="ünï ✉ step",
            status=StepStatus.WAITING,
            output={"€": [1.5, None, {"q": '"\\\\ \\n'}], "big": 10**18},
            started_at=now.astimezone(india),
            completed_at=None,
            wake_at=now + timedelta(days=3),
            event="order.paid ✓",
            correlation_key="42",
            event_cursor=17,
            attempts=3,
            kind=StepKind.WAIT,
            deadline=now.astimezone(india) + timedelta(days=7),
        )

    store.OrmStepStore(owner=owner).put(step(runs[0]))  # the fenced statement
    store.OrmStepStore().put(step(runs[1]))  # the ORM's create()
    columns = [
        f.attname for f in StepRecord._meta.concrete_fields if f.attname not in {"id", "run_id"}
    ]
    fenced, orm = (StepRecord.objects.filter(run_id=r.pk).values(*columns).get() for r in runs)
    assert fenced == orm
    assert fenced["started_at"] == now and fenced["output"]["big"] == 10**18
