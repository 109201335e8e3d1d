from django.db import models


class Effect(models.Model):
    """A side effect written by a test job; tests count rows to prove exactly-once."""

    name = models.CharField(max_length=200)
    run_id = models.CharField(max_length=64, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return self.name
