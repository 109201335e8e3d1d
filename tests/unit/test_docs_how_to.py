"""The how-to pages' python blocks (docs/how-to/results.md, messages.md, progress.md)
parse, and use no name that neither they nor an earlier block of their page bind:
a reader can copy them as they are. tests/integration/test_docs_how_to.py runs them."""

from __future__ import annotations

import ast
import builtins

import pytest

from tests.docs_how_to import PAGES, blocks


def _names(code: str) -> tuple[set[str], set[str]]:
    read: set[str] = set()
    bound: set[str] = set()
    for node in ast.walk(ast.parse(code)):
        if isinstance(node, ast.Name):
            (read if isinstance(node.ctx, ast.Load) else bound).add(node.id)
        elif isinstance(node, ast.alias):
            bound.add((node.asname or node.name).split(".")[0])
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound.add(node.name)
        elif isinstance(node, ast.arg):
            bound.add(node.arg)
        elif isinstance(node, ast.ExceptHandler) and node.name:
            bound.add(node.name)
    return read, bound


@pytest.mark.parametrize("page", PAGES)
def test_every_block_parses_and_names_only_what_the_page_binds(page: str) -> None:
    found = blocks(page)
    assert len(found) >= 3, page
    known = set(dir(builtins))
    for number, code in enumerate(found, start=1):
        read, bound = _names(code)
        known |= bound
        missing = read - known
        assert not missing, f"{page} block {number} uses {sorted(missing)}, never bound"
