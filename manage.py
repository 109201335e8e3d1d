#!/usr/bin/env python
"""Django's command-line utility for the example project."""

import os
import sys


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "example_project.settings")
    try:
        from django.core.management import execute_from_command_line
    except ImportError as exc:
        raise ImportError(
            "Couldn't import Django. Is it installed and available on your PYTHONPATH "
            "environment variable? Did you forget to activate a virtual environment "
            "(make venv, then .venv/<leg>/bin/python manage.py ...)?"
        ) from exc
    execute_from_command_line(sys.argv)


if __name__ == "__main__":
    main()
