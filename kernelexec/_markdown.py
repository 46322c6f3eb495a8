"""Fenced code blocks, as an LLM writes them in a message."""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["CodeBlock", "extract_code_blocks"]

_OPEN = re.compile(r"^ {0,3}(?P<fence>`{3,}|~{3,})\s*(?P<info>[^`]*?)\s*$")


@dataclass(frozen=True)
class CodeBlock:
    language: str
    code: str


def extract_code_blocks(text: str) -> list[CodeBlock]:
    """Every fenced block in order; an unclosed block runs to the end, as in CommonMark."""
    blocks: list[CodeBlock] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        opened = _OPEN.match(lines[i])
        if not opened:
            i += 1
            continue
        fence = opened["fence"]
        language = opened["info"].split()[0] if opened["info"] else ""
        body: list[str] = []
        i += 1
        while i < len(lines) and not _closes(lines[i], fence):
            body.append(lines[i])
            i += 1
        blocks.append(CodeBlock(language=language.strip("{}.").lower(), code="\n".join(body)))
        i += 1
    return blocks


def _closes(line: str, fence: str) -> bool:
    stripped = line.strip()
    return (
        len(stripped) >= len(fence)
        and set(stripped) == {fence[0]}
        and line.startswith(" " * (len(line) - len(line.lstrip(" "))))
        and len(line) - len(line.lstrip(" ")) <= 3
    )
