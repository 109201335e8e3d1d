"""Schema parts whose SQL differs per database: exact text columns and partial indexes.

Both keep one model definition (and one migration history) for every database while
giving MariaDB and MySQL what they lack or do differently:

- ``ExactCharField``: their usual collations (``utf8mb4_general_ci``,
  ``utf8mb4_unicode_ci``, ``utf8mb4_0900_ai_ci``) compare case-insensitively and
  ignore trailing spaces, so ``Load`` and ``load `` would be one step, one idempotency
  key, one lease owner. Identities must compare exactly, as they do on PostgreSQL and
  SQLite.
- ``PartialIndex``: they have no partial indexes (Django warns, W037, and builds the
  index over every row); there the index leads with the columns the condition tests.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.db import models
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.backends.base.schema import BaseDatabaseSchemaEditor
from django.db.backends.ddl_references import Statement
from django.db.models import Q


def exact_collation(connection: BaseDatabaseWrapper) -> str | None:
    """The binary, no-pad collation of ``connection``'s database; None where the default is exact.

    PostgreSQL's deterministic collations and SQLite's BINARY already tell ``a`` from
    ``A`` and ``a `` from ``a``. MariaDB's ``utf8mb4_nopad_bin`` and MySQL's
    ``utf8mb4_0900_bin`` (8.0.17+) do both; ``utf8mb4_bin``, the only binary utf8mb4
    collation of older MySQL 8.0 releases, still ignores trailing spaces.

    A column's type, asked by the schema editor and the model field as Django's own
    fields ask theirs: the one vendor decision outside ``dialect.py`` (the models,
    which ``dialect`` reads, are built on it).
    """
    if connection.vendor != "mysql":
        return None
    if getattr(connection, "mysql_is_mariadb", False):
        return "utf8mb4_nopad_bin"
    if getattr(connection, "mysql_version", (0,)) >= (8, 0, 17):
        return "utf8mb4_0900_bin"
    return "utf8mb4_bin"


class ExactCharField(models.CharField):  # type: ignore[type-arg]  # generic only in the stubs
    """A ``CharField`` compared exactly (case and trailing spaces count) on every database.

    For names and keys that identify something: job and queue names, step names,
    event names and keys, idempotency keys, lease owners. Example::

        name = ExactCharField(max_length=200)
    """

    def db_parameters(self, connection: BaseDatabaseWrapper) -> dict[str, Any]:
        params = super().db_parameters(connection)
        params["collation"] = self.db_collation or exact_collation(connection)
        return params


class PartialIndex(models.Index):
    """An index of the rows that match ``where``, or its nearest equivalent.

    PostgreSQL and SQLite get a partial index (``CREATE INDEX ... WHERE``), so rows
    that never match (millions of finished runs) neither slow the queries it serves
    nor take space. MariaDB and MySQL have no partial indexes: there the index has the
    columns ``elsewhere``, which lead with those ``where`` tests, then those the
    queries compare for equality, then the one they compare by range, so that the
    same queries read only matching rows through one range scan. Example::

        PartialIndex(fields=["lease_expires_at"], where=Q(status="running"),
                     elsewhere=["status", "lease_expires_at"], name="durable_run_lease")

    ``condition`` stays None: Django's check (W037) would otherwise warn on MariaDB
    and MySQL that the condition is ignored, which it is not here.
    """

    def __init__(
        self, *, fields: Sequence[str], name: str, where: Q, elsewhere: Sequence[str]
    ) -> None:
        super().__init__(fields=fields, name=name)
        self.where = where
        self.elsewhere = tuple(elsewhere)

    def deconstruct(self) -> tuple[str, Sequence[Any], dict[str, Any]]:
        path, args, kwargs = super().deconstruct()
        kwargs.update(where=self.where, elsewhere=self.elsewhere)
        return path, args, kwargs

    def on(self, connection: BaseDatabaseWrapper) -> models.Index:
        """The plain index this one is on ``connection``'s database."""
        if connection.features.supports_partial_indexes:
            return models.Index(fields=self.fields, name=self.name, condition=self.where)
        return models.Index(fields=list(self.elsewhere), name=self.name)

    def create_sql(
        self,
        model: type[models.Model],
        schema_editor: BaseDatabaseSchemaEditor,
        using: str = "",
        **kwargs: Any,
    ) -> Statement:
        index = self.on(schema_editor.connection)
        return index.create_sql(model, schema_editor, using=using, **kwargs)
