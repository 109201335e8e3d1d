from django.db import models


class Effect(models.Model):
    """A side effect written by a test job; tests count rows to prove exactly-once."""

    name = models.CharField(max_length=200)
    run_id = models.CharField(max_length=64, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return self.name


class Execution(models.Model):
    """One execution of a run's function by a worker process: ``tests.logged``'s
    (overlap detection), ``tests.once_in_a_batch``'s."""

    run_id = models.CharField(max_length=64)
    attempt = models.PositiveIntegerField()
    pid = models.PositiveIntegerField()
    #: ``time.time_ns()`` when the job function started and returned (0: not yet).
    started_ns = models.BigIntegerField()
    ended_ns = models.BigIntegerField(default=0)

    def __str__(self) -> str:
        return f"{self.run_id} #{self.attempt} pid {self.pid}"
