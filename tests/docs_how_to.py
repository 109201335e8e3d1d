"""The python blocks of the how-to pages about results, messages and progress
(docs/how-to/results.md, messages.md, progress.md), read from the pages themselves:
tests/unit/test_docs_how_to.py checks that each parses and names nothing undefined,
tests/integration/test_docs_how_to.py runs them."""

from __future__ import annotations

import re
import sys
import types
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGES = ("docs/how-to/results.md", "docs/how-to/messages.md", "docs/how-to/progress.md")
_FENCE = re.compile(r"^```python\n(.*?)^```", re.S | re.M)


def blocks(page: str) -> list[str]:
    """The page's python blocks, in order."""
    return _FENCE.findall((ROOT / page).read_text(encoding="utf-8"))


def load(page: str) -> types.ModuleType:
    """Every block of ``page`` executed in order as one module (a later block uses what
    an earlier one defined, as the page reads), registered in ``sys.modules`` so that
    its ``urlpatterns`` can be a ``ROOT_URLCONF``."""
    name = "docs_" + Path(page).stem.replace("-", "_")
    module = types.ModuleType(name)
    for number, code in enumerate(blocks(page)):
        exec(compile(code, f"{page} (block {number + 1})", "exec"), module.__dict__)
    sys.modules[name] = module
    return module
