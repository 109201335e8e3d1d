"""The documentation's pages (``docs/**/*.md``, the README, the CHANGELOG) as the tests
read them: code blocks with the heading they sit under, the commands of shell blocks,
sections by heading. Read with markdown-it (MyST's own parser, installed with the ``docs``
extra), so a fence inside a list or a note is found as the site shows it.

The tests built on it: tests/unit/test_docs_examples.py (every Python block parses and
names nothing undefined; the job definitions register; the reference tables list what the
code has), tests/unit/test_docs_commands.py (every ``manage.py`` and ``make`` command of a
shell block names a real command and real options), tests/integration/test_docs_examples.py
(the testing samples pass) and tests/processes/test_tutorial.py (the tutorial, followed).
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from markdown_it import MarkdownIt

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"

#: Languages whose blocks are shell commands, one a line (``#`` starts a comment).
SHELL = ("bash", "sh", "shell", "console")


@dataclass(frozen=True, kw_only=True)
class Block:
    """One fenced code block of a page."""

    page: str  # the page's path from the repository's root, e.g. docs/how-to/schedules.md
    heading: str  # the nearest heading above the block, without its #s
    lang: str
    code: str
    line: int  # where the fence starts (1-based)

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line} ({self.heading})"


def pages() -> list[Path]:
    """Every page of the site, then the README and the CHANGELOG."""
    found = sorted(p for p in DOCS.rglob("*.md") if "_build" not in p.parts)
    return [*found, ROOT / "README.md", ROOT / "CHANGELOG.md"]


def name(page: Path) -> str:
    return page.relative_to(ROOT).as_posix()


@cache
def blocks(page: Path) -> tuple[Block, ...]:
    """The fenced code blocks of ``page``, in order."""
    found: list[Block] = []
    heading = ""
    tokens = MarkdownIt("commonmark").parse(page.read_text(encoding="utf-8"))
    for i, token in enumerate(tokens):
        if token.type == "heading_open":
            heading = tokens[i + 1].content
        elif token.type == "fence" and token.map is not None:
            lang = token.info.split()[0] if token.info.strip() else ""
            where = token.map[0] + 1
            found.append(
                Block(page=name(page), heading=heading, lang=lang, code=token.content, line=where)
            )
    return tuple(found)


@cache
def inline_code(page: Path) -> tuple[str, ...]:
    """The inline code spans of ``page`` (```` `manage.py jobs list --status failed` ````)."""
    tokens = MarkdownIt("commonmark").parse(page.read_text(encoding="utf-8"))
    return tuple(
        child.content
        for token in tokens
        if token.type == "inline"
        for child in token.children or ()
        if child.type == "code_inline"
    )


def all_blocks(*langs: str) -> list[Block]:
    """The blocks of every page in those languages (every block without ``langs``)."""
    return [b for page in pages() for b in blocks(page) if not langs or b.lang in langs]


def block_under(page: str, heading: str, index: int = 0, lang: str = "python") -> str:
    """The ``index``-th block of ``lang`` under ``heading`` on ``page``."""
    found = [b.code for b in blocks(ROOT / page) if b.heading == heading and b.lang == lang]
    assert len(found) > index, f"{page}: no {lang} block {index} under {heading!r}"
    return found[index]


def commands(code: str) -> list[str]:
    """The commands of a shell block: one a line (a ``\\`` at the end joins the next),
    without comments and blank lines."""
    joined = re.sub(r"\\\n\s*", " ", code)
    found = []
    for line in joined.splitlines():
        words = shlex.split(line, comments=True)
        if words:
            found.append(shlex.join(words))
    return found


def section(page: str, title: str) -> str:
    """The text of ``page`` from the heading ``title`` to the next heading of that level
    or above (headings as markdown-it finds them: not a ``#`` comment in a code block)."""
    text = (ROOT / page).read_text(encoding="utf-8")
    tokens = MarkdownIt("commonmark").parse(text)
    headings = [
        (int(t.tag[1]), tokens[i + 1].content, t.map[0])
        for i, t in enumerate(tokens)
        if t.type == "heading_open" and t.map is not None
    ]
    starts = [(level, line) for level, content, line in headings if content == title]
    assert starts, f"{page} has no heading {title!r}"
    level, start = starts[0]
    ends = [line for lvl, _, line in headings if line > start and lvl <= level]
    lines = text.splitlines(keepends=True)
    return "".join(lines[start + 1 : ends[0] if ends else len(lines)])
