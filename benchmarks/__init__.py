"""Benchmarks for django-durable-jobs against its peers (see README.md; not shipped)."""
