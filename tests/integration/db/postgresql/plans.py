"""Plans of the statements a call runs on PostgreSQL, nested ones included: read with
auto_explain, whose plans come back as notices."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.db import connection


def nested_plans(call: Callable[[], Any], buffers: bool = False) -> list[str]:
    """Run ``call()`` with auto_explain on for this connection; the plans of every
    statement it ran, nested ones included (with ``buffers``, the pages each node read)."""
    plans: list[str] = []
    connection.ensure_connection()
    raw = connection.connection
    assert raw is not None

    def keep(diagnostic: Any) -> None:
        plans.append(str(diagnostic.message_primary))

    raw.add_notice_handler(keep)
    with connection.cursor() as cursor:
        cursor.execute("LOAD 'auto_explain'")
        for setting in (
            "auto_explain.log_min_duration = 0",
            "auto_explain.log_nested_statements = on",
            "auto_explain.log_analyze = on",
            "auto_explain.log_level = notice",
            f"auto_explain.log_buffers = {'on' if buffers else 'off'}",
        ):
            cursor.execute(f"SET {setting}")
    try:
        call()
    finally:
        raw.remove_notice_handler(keep)
        connection.close()  # auto_explain stays loaded in this session: start afresh
    return plans
