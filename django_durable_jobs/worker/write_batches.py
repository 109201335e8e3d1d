"""Writes of an event loop that wait for each other: the items that arrive while a
batch is being written go together in the next one (one statement, one commit for
many runs). The async lane's step records and outcomes are written this way."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Generic, TypeVar

T = TypeVar("T")

#: Writes a batch; returns, per item, None or what its own write raised.
BatchWriter = Callable[[list[T]], Awaitable[list[Exception | None]]]


class WriteBatches(Generic[T]):
    """Items written in batches by one task of ``loop`` at a time (on the loop only)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, write: BatchWriter[T]) -> None:
        self._loop = loop
        self._write = write
        #: Items waiting for the writer, each with the future its writer awaits.
        self._items: list[tuple[T, asyncio.Future[None]]] = []
        #: The writer at work, if any (kept here: the loop holds tasks only weakly).
        self._writing: asyncio.Task[None] | None = None

    def add(self, item: T) -> asyncio.Future[None]:
        """Write ``item`` with the next batch: the future is done once it is written,
        and holds the exception its write raised."""
        done = self._loop.create_future()
        self._items.append((item, done))
        if self._writing is None:
            self._writing = self._loop.create_task(self._writer())
        return done

    async def _writer(self) -> None:
        try:
            while self._items:
                batch, self._items = self._items, []
                errors = await self._write([item for item, _ in batch])
                for (_, done), error in zip(batch, errors, strict=True):
                    if done.done():
                        continue
                    if error is None:
                        done.set_result(None)
                    else:
                        done.set_exception(error)
        finally:
            self._writing = None
