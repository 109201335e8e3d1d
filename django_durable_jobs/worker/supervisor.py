"""Several worker processes (``runjobs --concurrency N``): a supervisor forks N
workers, forwards the first signal as a drain (SIGUSR1) and the second as an abandon
(SIGUSR2), and replaces a child that died unless it is stopping.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
from types import FrameType

from .. import conf
from .connections import check_pool, close_pools
from .lane_size import lane_capacity, lane_threads
from .loop import Worker, WorkerOptions
from .orphans import stop_with_parent

log = logging.getLogger("django_durable_jobs.worker")


def run_workers(options: WorkerOptions) -> int:
    """Run ``options.concurrency`` worker processes; returns the process exit code."""
    if options.concurrency <= 1:
        worker = Worker(options)
        worker.install_signal_handlers()
        worker.run()
        return 0
    # A pool too small for a worker refuses each child at its start: refused here once,
    # before any fork, instead of children replaced and refused again for ever.
    check_pool(conf.database(), lane_threads(lane_capacity(options.async_concurrency)))
    return Supervisor(options).run()


class Supervisor:
    def __init__(self, options: WorkerOptions) -> None:
        self.options = options
        self.children: dict[int, int] = {}  # pid -> slot
        self.stopping = False
        self.signals = 0

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self.signals += 1
        self.stopping = True
        forward = signal.SIGUSR1 if self.signals == 1 else signal.SIGUSR2
        for pid in list(self.children):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, forward)

    def _spawn(self, slot: int) -> None:
        close_pools()  # never share a connection across fork (nor a pool's)
        supervisor = os.getpid()
        pid = os.fork()
        if pid == 0:  # the child
            code = 1
            try:
                # Orphaned, it stops at once and gives its run back (see orphans.py).
                stop_with_parent(supervisor, signal.SIGUSR2)
                child = WorkerOptions(
                    **{
                        **self.options.__dict__,
                        "concurrency": 1,
                        "worker_id": f"{self.options.worker_id}/{slot}:{os.getpid()}",
                    }
                )
                worker = Worker(child)
                worker.install_signal_handlers()
                worker.run()
                code = 0
            except BaseException:
                log.exception("worker child %s crashed", slot)
            finally:
                os._exit(code)
        self.children[pid] = slot

    def run(self) -> int:
        signal.signal(signal.SIGTERM, self._on_signal)
        signal.signal(signal.SIGINT, self._on_signal)
        log.info(
            "supervisor %s: %d worker processes", self.options.worker_id, self.options.concurrency
        )
        for slot in range(self.options.concurrency):
            self._spawn(slot)
        failures = 0
        while self.children:
            try:
                pid, status = os.wait()
            except ChildProcessError:
                break
            except InterruptedError:
                continue
            if pid not in self.children:
                continue
            slot = self.children.pop(pid)
            code = os.waitstatus_to_exitcode(status)
            done = self.options.burst or self.options.max_runs is not None
            if code != 0 and not self.stopping:
                failures += 1
                log.error("worker child %s (pid %s) exited with %s; replacing it", slot, pid, code)
                self._spawn(slot)
            elif not done and not self.stopping:
                self._spawn(slot)
        return 0 if failures == 0 or self.stopping else 1
