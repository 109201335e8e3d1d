"""The async lane's threads: its database threads and those that call the sync step
functions of async jobs.

A ``ThreadPoolExecutor`` will not do: the interpreter joins its threads at exit, so one
step function that never returns (an HTTP call without a timeout, long past its
``step_timeout``, whose run has already failed) held ``runjobs --burst`` and a drained
worker open for good, even through a second SIGTERM; and a step write waiting for a
lock (someone's long transaction, a migration) held a stopped worker until the lock
was let go. These threads are daemons: a hung one is abandoned, with a warning, when
the worker exits.

Each thread ends by calling ``on_exit`` (closing its database connections), so closing
the pool closes every idle thread's connections without a barrier between them.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from concurrent.futures import Executor, Future
from typing import Any, TypeVar

log = logging.getLogger("django_durable_jobs.worker")
T = TypeVar("T")

_Call = tuple["Future[Any]", Callable[..., Any], tuple[Any, ...], dict[str, Any]]


class DaemonThreads(Executor):
    """Up to ``size`` daemon threads, started as calls need them. At shutdown, calls
    still running get ``patience`` seconds more to return; ``stuck`` is the warning
    logged for those that did not (``%d``: how many)."""

    def __init__(
        self,
        size: int,
        *,
        name: str,
        on_exit: Callable[[], None],
        stuck: str,
        patience: float = 0.0,
    ) -> None:
        if size < 1:
            raise ValueError(f"DaemonThreads needs at least one thread, not {size}")
        self._size = size
        self._name = name
        self._on_exit = on_exit
        self._stuck = stuck
        self._patience = patience
        self._calls: queue.SimpleQueue[_Call | None] = queue.SimpleQueue()
        self._threads: list[threading.Thread] = []
        self._busy: set[threading.Thread] = set()
        #: One for each thread between calls: the call it takes next is one submitted.
        self._idle = threading.Semaphore(0)
        self._lock = threading.Lock()
        self._closed = False

    def submit(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> Future[T]:
        future: Future[T] = Future()
        with self._lock:
            if self._closed:
                raise RuntimeError("cannot schedule new futures after shutdown")
            self._calls.put((future, fn, args, kwargs))
            if not self._idle.acquire(blocking=False) and len(self._threads) < self._size:
                thread = threading.Thread(
                    target=self._serve, name=f"{self._name}_{len(self._threads)}", daemon=True
                )
                self._threads.append(thread)
                thread.start()
        return future

    def shutdown(
        self, wait: bool = True, *, cancel_futures: bool = False, patience: float | None = None
    ) -> None:
        """No more calls; each thread closes (``on_exit``) once its call returns.
        ``wait`` waits up to 5 s for the idle threads to close, and up to ``patience``
        seconds (default: the one given at creation) for the calls still running: one
        that hangs longer is not waited for."""
        with self._lock:
            self._closed = True
            if cancel_futures:
                while True:
                    try:
                        call = self._calls.get_nowait()
                    except queue.Empty:
                        break
                    if call is not None:
                        call[0].cancel()
            idle = [thread for thread in self._threads if thread not in self._busy]
            busy = [thread for thread in self._threads if thread in self._busy]
            for _ in self._threads:
                self._calls.put(None)
        if wait:
            _join(idle, 5)
            _join(busy, self._patience if patience is None else patience)
        with self._lock:
            hung = len(self._busy)
        if hung:
            log.warning(self._stuck, hung)

    def _serve(self) -> None:
        me = threading.current_thread()
        try:
            while (call := self._calls.get()) is not None:
                future, fn, args, kwargs = call
                del call
                if not future.set_running_or_notify_cancel():
                    self._idle.release()
                    continue
                with self._lock:
                    self._busy.add(me)
                result: Any = None
                failure: BaseException | None = None
                try:
                    result = fn(*args, **kwargs)
                except BaseException as exc:  # handed to the awaiting step
                    failure = exc
                # Idle before the caller hears: a shutdown it then asks for waits for
                # this thread's end.
                with self._lock:
                    self._busy.discard(me)
                if failure is None:
                    future.set_result(result)
                else:
                    future.set_exception(failure)
                del future, result, failure  # no reference to them while idle
                self._idle.release()
        finally:
            self._on_exit()


def _join(threads: list[threading.Thread], seconds: float) -> None:
    """Wait up to ``seconds`` in all for ``threads`` to end."""
    deadline = time.monotonic() + seconds
    for thread in threads:
        thread.join(max(deadline - time.monotonic(), 0))
