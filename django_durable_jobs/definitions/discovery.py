"""Where jobs come from: autodiscovery imports each installed app's job modules
(``DURABLE_JOBS["JOB_MODULES"]``), and says, for people, where it looked and which
likely modules it did not import (the start-up banner, ``UnknownJob``)."""

from __future__ import annotations

import importlib

from django.apps import apps
from django.utils.module_loading import module_has_submodule

from .. import conf

#: The modules autodiscovery imported, or None before it ran (or with it turned off).
_discovered: list[str] | None = None


def autodiscover() -> list[str]:
    """Import every installed app's ``jobs`` module (like ``admin.autodiscover``), or the
    module names ``DURABLE_JOBS["JOB_MODULES"]`` lists; returns the modules imported."""
    global _discovered
    found = []
    for app in apps.get_app_configs():
        for module in conf.get("JOB_MODULES"):
            if module_has_submodule(app.module, module):
                importlib.import_module(f"{app.name}.{module}")
                found.append(f"{app.name}.{module}")
    _discovered = found
    return found


def where_jobs_come_from(*, advice: bool = True) -> str:
    """Where this process looked for jobs, for people: the start-up banner, UnknownJob;
    with ``advice``, what to do when a job is not there (not for a banner that lists
    the jobs it found)."""
    if _discovered is None:
        return 'jobs were not autodiscovered (DURABLE_JOBS["AUTODISCOVER"] is off)'
    names = " or ".join(f"{module}.py" for module in conf.get("JOB_MODULES"))
    found = ", ".join(_discovered) or "none"
    where = f"jobs are imported from each installed app's {names} (found: {found})"
    if not advice:
        return where
    return f'{where}; define it there, or add its module name to DURABLE_JOBS["JOB_MODULES"]'


def not_imported() -> str:
    """The installed apps' ``tasks`` modules (the Celery habit) that autodiscovery does
    not import, as a hint; empty when there is none or ``JOB_MODULES`` has ``tasks``."""
    if "tasks" in conf.get("JOB_MODULES"):
        return ""
    skipped = [
        f"{app.name}.tasks"
        for app in apps.get_app_configs()
        if module_has_submodule(app.module, "tasks")
    ]
    if not skipped:
        return ""
    return (
        f"not imported: {', '.join(skipped)} "
        '(add "tasks" to DURABLE_JOBS["JOB_MODULES"] if jobs are there)'
    )
