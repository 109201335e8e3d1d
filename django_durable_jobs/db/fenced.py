"""Writes fenced by the run's lease: a statement that lands only while its worker holds
the run (a step's ``durable_step_insert``, ``durable_step_update``; a run's outcome,
``outcome_sql``), built once per process for each set of columns."""

from __future__ import annotations

from typing import Any, cast

from django.db.models import Field

from ..models import JobRun, RunStatus, StepRecord

#: (database alias, statement, the columns written) -> ``fenced_sql``'s answer: built
#: once per process (building it cost as much as sending it).
_FENCED: dict[tuple[str, str, tuple[str, ...]], tuple[list[Any], str, list[str]]] = {}


#: The fields of the lease a fenced write checks (``fenced_sql``'s last three).
LEASE_FIELDS = [JobRun._meta.get_field(name) for name in ("id", "lease_owner", "status")]


def lease(run_id: Any, owner: str | None) -> list[tuple[Any, Any]]:
    """The last parameters of a fenced write, each a field and its value: the lease it
    is fenced by (the run's id, its owner, and running)."""
    return list(zip(LEASE_FIELDS, [run_id, owner, RunStatus.RUNNING.value], strict=True))


def fenced_sql(
    connection: Any, statement: str, columns: tuple[str, ...]
) -> tuple[list[Any], str, list[str]]:
    """The fields, the SQL and the parameter types of a fenced step write of
    ``columns`` (after ``run`` and ``name``), for this connection's database:

    - ``durable_step_insert``: ``INSERT ... SELECT ... FROM run WHERE lease_owner = me``;
    - ``durable_step_update``: ``UPDATE ... WHERE run, name AND EXISTS (the run, leased
      to me)``, a known record rewritten (a wait that matched, a retried step).

    Both take the record's values, then the run's id, the lease owner and ``running``.
    With the suffix ``_locked`` (an atomic step's record) the run's row is also locked
    (``FOR UPDATE``, where the database has row locks) until the transaction ends: a
    worker taking the run over waits for the step's commit, and then sees its record.
    """
    key = (connection.alias, statement, columns)
    if key not in _FENCED:
        qn = connection.ops.quote_name
        meta, run_meta = StepRecord._meta, JobRun._meta
        assert run_meta.pk is not None
        fields = [
            cast("Field[Any, Any]", meta.get_field(name)) for name in ("run", "name", *columns)
        ]
        marks = [f"${number}" for number in range(1, len(fields) + 4)]
        leased = (
            f"{qn(str(run_meta.pk.column))} = {marks[-3]} "
            f"AND {qn('lease_owner')} = {marks[-2]} AND {qn('status')} = {marks[-1]}"
        )
        if statement.endswith("_locked") and connection.features.has_select_for_update:
            leased += " FOR UPDATE"
        if statement.startswith("durable_step_insert"):
            sql = (
                f"INSERT INTO {qn(meta.db_table)} ({', '.join(qn(str(f.column)) for f in fields)}) "
                f"SELECT {', '.join(marks[: len(fields)])} FROM {qn(run_meta.db_table)} "
                f"WHERE {leased}"
            )
        else:
            run_column, name_column = (qn(str(f.column)) for f in fields[:2])
            assignments = ", ".join(
                f"{qn(str(f.column))} = {mark}"
                for f, mark in zip(fields[2:], marks[2 : len(fields)], strict=True)
            )
            sql = (
                f"UPDATE {qn(meta.db_table)} SET {assignments} "
                f"WHERE {run_column} = {marks[0]} AND {name_column} = {marks[1]} "
                f"AND EXISTS (SELECT 1 FROM {qn(run_meta.db_table)} WHERE {leased})"
            )
        # The parameters' types, from the same fields as the statement.
        guards = [run_meta.pk, run_meta.get_field("lease_owner"), run_meta.get_field("status")]
        types = [str(field.db_type(connection)) for field in [*fields, *guards]]
        _FENCED[key] = (fields, sql, types)
    return _FENCED[key]


def outcome_sql(connection: Any, columns: tuple[str, ...]) -> tuple[str, list[Any], str, list[str]]:
    """The statement's name, the fields, the SQL and the parameter types of an outcome's
    write of ``columns`` (fields of ``JobRun``): ``UPDATE`` of the run, only while
    ``lease_owner`` holds it and it is running. It takes the columns' values, then the
    run's id, the lease owner and ``running``. The ORM compiled it afresh for every run
    (a third of a no-op run's recording on SQLite)."""
    key = (connection.alias, columns)
    if key not in _OUTCOMES:
        qn = connection.ops.quote_name
        meta = JobRun._meta
        assert meta.pk is not None
        fields = [cast("Field[Any, Any]", meta.get_field(name)) for name in columns]
        marks = [f"${number}" for number in range(1, len(fields) + 4)]
        assignments = ", ".join(
            f"{qn(str(field.column))} = {mark}"
            for field, mark in zip(fields, marks[: len(fields)], strict=True)
        )
        sql = (
            f"UPDATE {qn(meta.db_table)} SET {assignments} "
            f"WHERE {qn(str(meta.pk.column))} = {marks[-3]} "
            f"AND {qn('lease_owner')} = {marks[-2]} AND {qn('status')} = {marks[-1]}"
        )
        types = [str(field.db_type(connection)) for field in [*fields, *LEASE_FIELDS]]
        # Named for PostgreSQL, which prepares each once per connection.
        _OUTCOMES[key] = (f"durable_outcome_{len(_OUTCOMES)}", fields, sql, types)
    return _OUTCOMES[key]


#: (database alias, the columns written) -> ``outcome_sql``'s answer: built once.
_OUTCOMES: dict[tuple[str, tuple[str, ...]], tuple[str, list[Any], str, list[str]]] = {}
