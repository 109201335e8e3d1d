"""The seam to the database: claims, step and event rows, flow-control rows, and the
schema parts whose SQL differs per database.

Only this layer (and ``models``) knows SQL dialects. It builds on ``models``,
``engine/`` and ``registry`` and never imports the worker, the verbs, the admin, the
management commands or ``observe/`` (``tests/unit/test_layers.py``).
"""
