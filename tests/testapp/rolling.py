"""What both deploys of the rolling deploy share (rolling_v1.py, rolling_v2.py), in a
module that registers no job: importing it registers no version."""

from __future__ import annotations

import os

from .models import Effect

NAME = "tests.rolling"


def step_by_worker(name: str, run_id: str) -> str:
    """A side effect counted per run and step, named after the worker that ran it."""
    role = os.environ.get("ROLLING_ROLE", "test")
    Effect.objects.create(name=f"{name}@{role}", run_id=run_id)
    return role
