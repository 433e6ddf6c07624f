"""Reading the examples out of README.md and docs/*.md (for ``tests/test_docs.py``).

The conventions a doc follows are in ``tests/test_docs.py``'s module doc; this
module only parses: fenced blocks with their markers, relative links, heading
anchors, and the ``...`` patterns of expected output.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

SHELL = frozenset({"sh", "bash"})
NOT_RUN = re.compile(r"^<!-- not run: (\S.*?) -->$")
OUTPUT = "<!-- output -->"
MODULE = re.compile(r"^# ([A-Za-z_][A-Za-z0-9_]*)\.py$")
FENCE = re.compile(r"^```(\S*)\s*$")
LINK = re.compile(r"\[[^\]\n]*\]\(([^)\s]+)\)")
CODE_SPAN = re.compile(r"`[^`\n]*`")


@dataclass
class Block:
    """One fenced block of a doc."""

    path: Path
    line: int  # 1-based line of the opening fence
    lang: str
    text: str
    not_run: str | None = None  # the reason, when marked
    output: Block | None = None  # the expected output, when the doc shows it
    is_output: bool = False

    @property
    def name(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"

    @property
    def module(self) -> str | None:
        """The module name of a python block that starts with ``# NAME.py``."""
        if self.lang != "python":
            return None
        first = self.text.split("\n", 1)[0]
        match = MODULE.match(first)
        return match.group(1) if match else None


def blocks_of(path: Path) -> list[Block]:
    """Every fenced block of ``path``, markers attached; output blocks are joined
    to the block before them (a ValueError if that is not a shell or python block)."""
    lines = path.read_text(encoding="utf-8").split("\n")
    blocks: list[Block] = []
    i = 0
    while i < len(lines):
        match = FENCE.match(lines[i])
        if not match:
            i += 1
            continue
        start = i
        end = start + 1
        while end < len(lines) and lines[end].rstrip() != "```":
            end += 1
        if end == len(lines):
            raise ValueError(f"{path}:{start + 1}: a fence that is never closed")
        before = lines[start - 1].strip() if start > 0 else ""
        block = Block(path, start + 1, match.group(1), "\n".join(lines[start + 1 : end]) + "\n")
        marker = NOT_RUN.match(before)
        if marker:
            block.not_run = marker.group(1)
        if before == OUTPUT:
            block.is_output = True
            owner = blocks[-1] if blocks else None
            if owner is None or owner.lang not in SHELL | {"python"} or owner.output:
                raise ValueError(f"{block.name}: an output block must follow a command block")
            owner.output = block
        blocks.append(block)
        i = end + 1
    return blocks


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped but ``-``
    and ``_``, spaces as ``-``."""
    text = heading.strip().lower().replace("`", "")
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors_of(path: Path) -> set[str]:
    """The anchors of a markdown file's headings (outside fenced blocks)."""
    found: set[str] = set()
    fenced = False
    for line in path.read_text(encoding="utf-8").split("\n"):
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and line.startswith("#"):
            found.add(slug(line.lstrip("#")))
    return found


def links_of(path: Path) -> list[tuple[int, str]]:
    """(line, target) of every markdown link outside code."""
    links: list[tuple[int, str]] = []
    fenced = False
    for number, line in enumerate(path.read_text(encoding="utf-8").split("\n"), 1):
        if line.startswith("```"):
            fenced = not fenced
            continue
        if fenced:
            continue
        for match in LINK.finditer(CODE_SPAN.sub("", line)):
            links.append((number, match.group(1)))
    return links


def output_pattern(expected: str) -> re.Pattern[str]:
    """``expected`` as a regex: ``...`` matches anything, whitespace any whitespace."""
    parts = []
    for token in re.split(r"(\.\.\.|\s+)", expected.strip()):
        if token == "...":
            parts.append(".*?")
        elif token.isspace():
            parts.append(r"\s+")
        elif token:
            parts.append(re.escape(token))
    return re.compile("".join(parts), re.DOTALL)
