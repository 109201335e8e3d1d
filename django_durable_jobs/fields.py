"""Model fields of the app's own."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.conf import settings
from django.db import models
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models.expressions import Combinable
from django.utils import timezone


class InstantField(models.DateTimeField):  # type: ignore[type-arg]
    """A ``DateTimeField`` that speaks aware datetimes to Python whatever ``USE_TZ`` says.

    Leases, wake times and deadlines are instants, computed from an aware clock. With
    ``USE_TZ = False`` Django stores naive local times (``TIME_ZONE``) and SQLite and
    MySQL refuse aware values, so this field converts an aware value to local time on
    the way in and reads a naive one back as local time: the project's setting decides
    the column's contents, the app's code never sees a naive datetime.
    """

    # What django-stubs reads to type the attribute, as for a DateTimeField.
    _pyi_private_set_type: str | datetime | Combinable
    _pyi_private_get_type: datetime
    _pyi_lookup_exact_type: str | datetime

    def get_db_prep_value(
        self, value: Any, connection: BaseDatabaseWrapper, prepared: bool = False
    ) -> Any:
        if isinstance(value, datetime) and not settings.USE_TZ and timezone.is_aware(value):
            value = timezone.make_naive(value)
        return super().get_db_prep_value(value, connection, prepared)

    def from_db_value(self, value: Any, expression: Any, connection: BaseDatabaseWrapper) -> Any:
        if isinstance(value, datetime) and timezone.is_naive(value):
            return timezone.make_aware(value)
        return value

    def deconstruct(self) -> Any:
        # Stored exactly like a DateTimeField: migrations need not know the difference.
        name, _, args, kwargs = super().deconstruct()
        return name, "django.db.models.DateTimeField", args, kwargs
