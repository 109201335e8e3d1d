"""How many runs a worker's next claim may take: a batch that adapts to the backlog.

A claim takes one run at first; the batch doubles while claims come back full, up to
``MAX_BATCH`` while they bring only async runs and ``MAX_SYNC_BATCH`` when they bring
sync runs (the sync runs of one batch wait for each other), and falls back to one run
after a slow sync run. Never more than the process can start soon (the async lane's
free slots), nor than ``--max-runs`` leaves. Runs on their last attempt are batched
like the others: a batch's run that never began keeps its attempt if the worker dies
(``claims.requeue_expired``).
"""

from __future__ import annotations

#: The most runs one claim takes (with an async lane), and with sync runs only.
MAX_BATCH = 200
MAX_SYNC_BATCH = 32


class Batching:
    """The batch size and what the last claims and runs said about it."""

    def __init__(self) -> None:
        #: How many runs the next claim may take, before the lane and ``--max-runs``.
        self.size = 1
        #: Whether the last claim took all it could, and whether it brought sync runs.
        self._full = self._sync_claimed = False
        #: Whether a sync run since the last claim was slow.
        self.slow = False

    def claimed(self, taken: int, limit: int, *, sync: bool) -> None:
        """A claim with room for ``limit`` runs took ``taken`` (some sync: ``sync``)."""
        self._full = bool(taken) and taken == limit
        self._sync_claimed = sync

    def next(self, *, free: int | None, left: int | None) -> int:
        """The next claim's limit: ``free`` slots in the async lane (None without one),
        ``left`` runs that ``--max-runs`` still allows besides those in hand (None: no
        bound; 0 or less: claim none)."""
        if self.slow:
            self.size = 1
        elif self._full:
            most = MAX_SYNC_BATCH if free is None or self._sync_claimed else MAX_BATCH
            self.size = min(self.size * 2, most)
        self.slow = self._full = False
        batch = self.size if free is None else min(self.size, max(free, 1))
        return batch if left is None else min(batch, left)
