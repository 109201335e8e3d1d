"""The README cites no document missing from the repository (the wheel itself:
tests/processes/test_packaging.py)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_readme_cites_no_document_missing_from_the_repository():
    readme = (ROOT / "README.md").read_text()
    assert not re.search(r"\bSPEC\b", readme)
    for link in re.findall(r"\]\(([^)#:]+)\)", readme):  # relative links only
        assert (ROOT / link).exists(), link
    assert (ROOT / "LICENSE").read_text().startswith("MIT License")
