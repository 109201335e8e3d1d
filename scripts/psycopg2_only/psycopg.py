"""Put this folder first on ``PYTHONPATH`` and psycopg 3 cannot be imported: Django then
uses psycopg2, as in a project that has only psycopg2 installed (the Makefile's
``suite-postgresql-psycopg2``)."""

raise ImportError("psycopg 3 is hidden here (scripts/psycopg2_only): this process uses psycopg2")
