"""The README and the CHANGELOG cite no document missing from the repository (the
documentation's own links: the docs build, ``make docs``; the wheel itself:
tests/processes/test_packaging.py)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_readme_cites_no_document_missing_from_the_repository():
    for name in ("README.md", "CHANGELOG.md", "CONTRIBUTING.md"):
        text = (ROOT / name).read_text()
        assert not re.search(r"\bSPEC\b", text)
        text = re.sub(r"(`+).*?\1", "", text)  # a link shown as code is not one
        for link in re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", text):  # relative links only
            assert (ROOT / link).exists(), f"{name}: {link}"
    assert (ROOT / "LICENSE").read_text().startswith("MIT License")


def test_the_changelog_keeps_an_unreleased_section_first():
    """Keep a Changelog: what is not released yet comes first, under "Unreleased"."""
    changelog = (ROOT / "CHANGELOG.md").read_text()
    versions = re.findall(r"^## (.+)$", changelog, re.M)
    assert versions[0] == "Unreleased"
    for version in versions[1:]:  # "0.1.0 - 2027-01-15"
        assert re.fullmatch(r"\d+\.\d+\.\d+\S* - \d{4}-\d{2}-\d{2}", version), version
