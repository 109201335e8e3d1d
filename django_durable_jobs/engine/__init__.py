"""The engine: steps, their records and the outcome of an attempt, as plain Python.

It knows nothing of Django: it talks to a
``StepStore``, an ``EventLookup`` and a ``Clock`` (protocols in ``records`` and
``clock``), so the same code runs on the in-memory stores in tests and on the ORM
ones in ``db/``. ``tests/unit/test_layers.py`` proves that no module here imports Django
or anything of the package outside ``engine/`` but ``exceptions``.
"""
