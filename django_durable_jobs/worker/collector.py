"""The worker process's garbage collector, tuned once its start-up is done.

A worker holds many objects for its whole life (Django's, the project's modules, the
job registry; with an async lane, the state of every run in flight) and makes many
short-lived ones for each run. With Python's default thresholds (a collection of the
youngest generation every 700 net allocations of container objects) the collector
walked the runs in flight hundreds of times a second: a third of the CPU of a worker
with 1,000 async runs in flight (``benchmarks/README.md``, "The worker's garbage
collector").
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

#: Net allocations of container objects between two collections of the youngest
#: generation (Python's default: 700), and collections of it between two of the middle
#: one (default: 10).
YOUNG = 50_000
MIDDLE = 20


@contextmanager
def tuned() -> Iterator[None]:
    """While the worker runs: what start-up left alive is out of the collector's sight
    (``gc.freeze``: it lives as long as the process, and a ``--concurrency`` child
    shares its memory pages with the supervisor instead of copying them when a
    collection touches them), and the young generations are collected less often:
    garbage in reference cycles waits longer to be freed (``YOUNG`` objects' worth at
    most). Thresholds set higher already are kept, and a collector the project
    disabled is left alone. For a process that is the worker (``runjobs`` from the
    command line): what it froze stays frozen (``gc.unfreeze`` would also thaw what
    the interpreter or the project froze)."""
    if not gc.isenabled():
        yield
        return
    threshold = gc.get_threshold()
    gc.collect()  # the garbage of start-up, not frozen with the rest
    gc.freeze()
    young, middle, old = threshold
    gc.set_threshold(max(young, YOUNG), max(middle, MIDDLE), old)
    try:
        yield
    finally:
        gc.set_threshold(*threshold)
