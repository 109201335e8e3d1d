"""The ``runjobs`` worker: its loop, the execution of a claimed run, the heartbeat
that renews leases, the async lane, wake-ups, and the rows that show workers."""
