"""Model fields of the app's own."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any, TypeVar

from django.conf import settings
from django.db import models
from django.db.backends.base.base import BaseDatabaseWrapper
from django.utils import timezone

_ST = TypeVar("_ST", contravariant=True)
_GT = TypeVar("_GT", covariant=True)

if TYPE_CHECKING:
    _DateTimeField = models.DateTimeField
else:

    class _DateTimeField(models.DateTimeField):
        """Subscriptable, as django-stubs makes Django's fields for the type checker."""

        def __class_getitem__(cls, params: Any) -> type:
            return cls


class InstantField(_DateTimeField[_ST, _GT]):
    """A ``DateTimeField`` that speaks aware datetimes to Python whatever ``USE_TZ`` says.

    Leases, wake times and deadlines are instants, computed from an aware clock. With
    ``USE_TZ = False`` Django stores naive local times (``TIME_ZONE``) and SQLite and
    MySQL refuse aware values, so this field converts an aware value to local time on
    the way in and reads a naive one back as local time: the project's setting decides
    the column's contents, the app's code never sees a naive datetime.
    """

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
