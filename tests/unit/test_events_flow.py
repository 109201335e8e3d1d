"""``publish_on`` refuses bad arguments when it is called (at import), not at the first
save."""

from __future__ import annotations

import pytest
from django.db.models.signals import post_save

from django_durable_jobs import publish_on
from tests.testapp.models import Effect


def test_publish_on_rejects_bad_arguments() -> None:
    with pytest.raises(ValueError, match="event names"):
        publish_on(post_save, sender=Effect, event="")
    with pytest.raises(TypeError, match="key must be a callable"):
        publish_on(post_save, sender=Effect, event="x", key="customer_id")
