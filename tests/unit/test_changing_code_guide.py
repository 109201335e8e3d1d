"""The guide docs/how-to/changing-code.md: every python block parses and defines or
imports every name it uses, but the reader's own step functions. Its blocks run, deploy
after deploy, in tests/integration/test_changing_code_guide.py."""

from __future__ import annotations

import ast
import re
import textwrap
from pathlib import Path

import pytest

from tests.unit.test_readme_examples import undefined_names

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "how-to" / "changing-code.md"

#: The reader's own functions, which the steps call and the guide does not define.
YOURS = {
    "load_user",
    "send_welcome",
    "send_sms",
    "send_tips",
    "charge_card",
    "charge_card_cents",
    "send_receipt",
    "order_total",
    "send_invoice",
}


def guide_blocks() -> list[tuple[str, str]]:
    """(the ``##`` heading above it, its code) for each ```python block of the guide."""
    blocks: list[tuple[str, str]] = []
    heading = ""
    fence = re.compile(r"^([ \t]*)```python\n(.*?)^\1```", re.S | re.M)
    for part in re.split(r"^(## .*)$", GUIDE.read_text(encoding="utf-8"), flags=re.M):
        if part.startswith("## "):
            heading = part[3:].strip()
            continue
        blocks += [(heading, textwrap.dedent(m.group(2))) for m in fence.finditer(part)]
    return blocks


def test_the_guide_has_a_block_for_each_change() -> None:
    headings = [heading for heading, _ in guide_blocks()]
    assert headings == [
        "",  # the job before any change
        "Add a step",
        "Add a step",  # the patch, deprecated
        "Remove a step",
        "Change a step's meaning",
        "Change a step's meaning",
        "Change the arguments",
    ]


@pytest.mark.parametrize("index", range(7))
def test_each_block_compiles_and_uses_only_names_it_has(index: int) -> None:
    heading, code = guide_blocks()[index]
    compile(ast.parse(code), f"changing-code.md block {index}", "exec")
    missing = undefined_names(code) - YOURS
    assert not missing, f"block {index} ({heading!r}) uses names it never defines: {missing}"
