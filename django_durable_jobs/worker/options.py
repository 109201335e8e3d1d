"""How one worker process runs (``runjobs``' options): its queues, concurrency, burst
mode, drain time-out and async slots."""

from __future__ import annotations

import os
import socket
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import timedelta


@dataclass(frozen=True, kw_only=True)
class WorkerOptions:
    queues: Sequence[str] | None = None
    concurrency: int = 1
    burst: bool = False
    max_runs: int | None = None
    poll_interval: timedelta = timedelta(seconds=1)
    worker_id: str = field(default_factory=lambda: f"{socket.gethostname()}:{os.getpid()}")
    drain_timeout: timedelta = timedelta(seconds=30)
    #: Async runs in flight at once (None: DURABLE_JOBS["ASYNC_CONCURRENCY"]).
    async_concurrency: int | None = None
