"""A run's flow-control keys (docs/how-to/flow-control.md) as operators read them, on the
admin's run page and in ``jobs show``: the keys its job's limits computed at enqueue, and
only those."""

from __future__ import annotations

from ..models import JobRun

#: The key columns of a run and their labels, in the order they are shown.
KEYS: dict[str, str] = {
    "concurrency_key": "concurrency key",
    "throttle_key": "throttle key",
    "rate_limit_key": "rate limit key",
    "debounce_key": "debounce key",
}
#: How the key "" reads: the limit counts every run of the job together.
EVERY_RUN = "(every run of the job)"


def flow_keys(run: JobRun) -> dict[str, str]:
    """``run``'s keys by column, as stored. A column left NULL (the job had no such
    limit when the run was enqueued) is left out; "" is a key (see ``EVERY_RUN``).

    >>> flow_keys(JobRun(concurrency_key="42", throttle_key=""))
    {'concurrency_key': '42', 'throttle_key': ''}
    """
    keys: dict[str, str] = {}
    for name in KEYS:
        value = getattr(run, name)
        if value is not None:
            keys[name] = value
    return keys


def key_text(key: str) -> str:
    """A key for people: as stored, or ``EVERY_RUN`` for ""."""
    return key or EVERY_RUN


def key_pairs(run: JobRun) -> list[tuple[str, str]]:
    """(label, text) of each key ``run`` holds: ``[("concurrency key", "42")]``."""
    return [(KEYS[name], key_text(value)) for name, value in flow_keys(run).items()]
