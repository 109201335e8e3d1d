"""A worker started by a test dies with the test process.

A test kills its workers when it ends, but a pytest process that is killed itself
(``timeout``, an xdist worker replaced, Ctrl-C twice) never gets there: its
single-process ``runjobs`` workers went on polling, and six of them once took 80 % of
this machine's CPU until killed by hand. ``PR_SET_PDEATHSIG`` (Linux; the worker's own
``orphans.signal_on_parent_death``) has the kernel send the worker SIGKILL when the
test process is gone; elsewhere nothing changes.
"""

from __future__ import annotations

import functools
import signal

from django_durable_jobs.worker.orphans import signal_on_parent_death

#: ``Popen(preexec_fn=...)`` for a worker that must not outlive the test process.
die_with_test = functools.partial(signal_on_parent_death, signal.SIGKILL)
