"""Kept at this path because migrations import it (``django_durable_jobs.schema``):
migration files are history and are not rewritten. The code lives in ``db/schema.py``."""

from .db.schema import ExactCharField, PartialIndex

__all__ = ["ExactCharField", "PartialIndex"]
