"""The application side of ``test_pgbouncer``, in a process of its own that reaches the
database through the pooler: ``python -m tests.processes.pooled_client enqueue N`` (N
runs of each kind from 4 threads, every other one inside ``transaction.atomic()``),
``... publish`` (an event to each waiting ``tests.pooled`` run). Prints what failed."""

from __future__ import annotations

import os
import sys
import threading
from collections import Counter

THREADS = 4


def enqueue(n: int) -> Counter[str]:
    from django.db import connections, transaction

    from tests.testapp import async_jobs, jobs

    failed: Counter[str] = Counter()

    def one_thread(first: int) -> None:
        for number in range(first, n, THREADS):
            try:
                if number % 2:
                    with transaction.atomic():
                        jobs.pooled.enqueue(f"k{number}")
                        async_jobs.async_logged.enqueue(number)
                else:
                    jobs.pooled.enqueue(f"k{number}")
                    async_jobs.async_logged.enqueue(number)
            except Exception as exc:  # counted, printed: the test says which
                failed[f"{type(exc).__name__}: {str(exc).splitlines()[0]}"] += 1
        connections.close_all()

    threads = [threading.Thread(target=one_thread, args=(i,)) for i in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return failed


def publish() -> Counter[str]:
    from django_durable_jobs import publish_event
    from django_durable_jobs.models import JobRun

    failed: Counter[str] = Counter()
    for args in JobRun.objects.filter(job_name="tests.pooled").values_list("args", flat=True):
        try:
            publish_event("pooled.paid", {"key": args[0]}, key=args[0])
        except Exception as exc:
            failed[f"{type(exc).__name__}: {str(exc).splitlines()[0]}"] += 1
    return failed


def main() -> int:
    import django

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")
    django.setup()
    failed = enqueue(int(sys.argv[2])) if sys.argv[1] == "enqueue" else publish()
    for what, count in failed.items():
        print(f"{count} x {what}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
