"""Sphinx configuration of the documentation site: ``make docs`` builds it into
``.tmp/docs/html`` with warnings as errors (CONTRIBUTING.md, "Documentation").

The pages are Markdown (MyST), laid out as tutorial, how-to guides, reference and
explanation. The Python API page is autodoc, which imports the package: Django is set up
here with the smallest settings that install it. Nothing is fetched from the network: no
intersphinx, and Furo uses the system's fonts.
"""

from __future__ import annotations

import sys
from pathlib import Path

import django
from django.conf import settings

DOCS = Path(__file__).resolve().parent
sys.path[:0] = [str(DOCS.parent), str(DOCS / "_ext")]

settings.configure(
    INSTALLED_APPS=[
        "django.contrib.admin",
        "django.contrib.auth",
        "django.contrib.contenttypes",
        "django.contrib.messages",
        "django.contrib.sessions",
        "django_durable_jobs",
    ],
    DATABASES={"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"}},
    USE_TZ=True,
)
django.setup()

project = "django-durable-jobs"
author = "django-durable-jobs contributors"
copyright = "django-durable-jobs contributors"
extensions = ["myst_parser", "sphinx.ext.autodoc", "manage_help"]
source_suffix = {".md": "markdown"}
exclude_patterns = ["_build", "_ext"]
# [text](page.md#a-heading) links are checked against the headings, down to ###.
myst_heading_anchors = 3
myst_enable_extensions = ["colon_fence"]

autodoc_member_order = "bysource"
autodoc_typehints = "signature"
autodoc_default_options = {"members": True}

# A fence without a language is plain text (terminal output), not Python.
highlight_language = "text"

html_theme = "furo"
html_title = "django-durable-jobs"
html_static_path: list[str] = []
html_copy_source = False
