"""Integrations with other APIs: ``tasks`` is the ``django.tasks`` backend."""
