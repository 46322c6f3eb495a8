"""A message as an LLM writes it: its fenced blocks, which of them run, and what each did.

The blocks are read as a reader of the rendered message sees them (CommonMark
fences, with the leniency that LLM output needs):

- ```` ``` ```` and ``~~~`` fences of three or more characters; a block ends at
  a fence of the same character at least as long, or at the end of the
  message (an unclosed block, as CommonMark renders it).
- A fence may be indented, as it is inside a list item (or opened on the list
  marker's own line, ``1. ```bash``); its indentation is removed from every
  line of the body, as a reader sees the code. The closing fence may be less
  indented than the opening one (an LLM often closes a list item's block at
  the margin).
- The language is the first word of the info string: ```` ```python title="x.py" ````,
  ```` ```python {.class} ````, ```` ```{python} ````, ```` ```{.python .numberLines} ````
  and ```` ```py:setup.py ```` are all python.
- A line like ```` ```x = 1``` ```` is inline code, not a fence.

Each block is then one of three kinds: code kernelexec runs (python, bash and
their aliases, see ``_languages``), a block that is not code (``NOT_CODE``:
text, output, terminal sessions, data and markup) which is skipped, or code in
a language kernelexec cannot run, which fails at its position. An unlabelled
block is read by ``_unlabelled``: python or shell code runs, output (a fence
right after "Expected output:", printed values) and text are skipped; with
``strict`` every unlabelled block is python.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from .._execution._languages import normalize_language
from .._execution._models import ExecutionResult
from ._unlabelled import Reading, read_unlabelled

__all__ = [
    "NOT_CODE",
    "BlockResult",
    "BlockStatus",
    "CodeBlock",
    "extract_code_blocks",
    "run_blocks",
    "summarize",
]

NOT_CODE = frozenset(
    {
        # Prose and plain text.
        *("text", "txt", "plain", "plaintext", "plain-text", "none", "nohighlight"),
        *("no-highlight", "raw", "verbatim", "ascii", "quote", "note"),
        # What code printed, or should print.
        *("output", "out", "result", "results", "stdout", "stderr", "expected"),
        *("log", "logs", "traceback", "pytb", "py3tb", "python-traceback"),
        # Terminal and REPL sessions: prompts mixed with output; to run
        # commands, an LLM writes them in a bash block.
        *("console", "shell-session", "sh-session", "terminal", "term"),
        *("pycon", "python-console", "doctest", "ipython-console", "repl"),
        # Data and configuration.
        *("json", "jsonc", "json5", "jsonl", "ndjson", "geojson", "yaml", "yml", "toml"),
        *("ini", "cfg", "conf", "config", "properties", "env", "dotenv", "csv", "tsv"),
        *("xml", "http", "requirements", "gitignore", "dockerfile", "containerfile"),
        *("makefile",),
        # Markup, styles, diagrams and diffs.
        *("markdown", "md", "mdx", "rst", "restructuredtext", "asciidoc", "tex", "latex"),
        *("math", "bibtex", "html", "htm", "xhtml", "svg", "css", "mermaid", "dot"),
        *("graphviz", "plantuml", "diff", "patch", "udiff"),
    }
)
"""Fence languages that are not code to run: their blocks are skipped."""

BlockStatus = Literal[
    "ok", "error", "timeout", "kernel_died", "cancelled", "quota_exceeded", "skipped", "not_run"
]

# An opening fence: indentation, an optional list marker, the fence, the info string.
_OPEN = re.compile(
    r"^(?P<lead>[ \t]*(?:(?:[-*+]|\d{1,9}[.)])[ \t]+)?)(?P<fence>`{3,}|~{3,})(?P<info>.*)$"
)
# The language: the first word of the info string, after an optional "{" and ".".
_LANGUAGE = re.compile(r"\{?\s*\.?(?P<name>[^\s{}(),:;=`'\"]*)")
_FIRST_LINE_CHARS = 80


@dataclass(frozen=True)
class CodeBlock:
    """One fenced block of a message.

    Attributes:
        index: its position among the message's fenced blocks, from 1.
        language: the fence's language as written, lowercased; "" when unlabelled.
        code: the body, the fence's indentation removed.
        line: the line of the opening fence in the message, from 1 (None
            when the block did not come from a message, e.g. a notebook cell).
        reading: for an unlabelled block of a message, what kernelexec read it
            as (``_unlabelled``); None for a labelled block, or an unlabelled
            one read as python without looking (``strict``, a notebook cell).
    """

    index: int
    language: str
    code: str
    line: int | None = None
    reading: Reading | None = None

    @property
    def runs_as(self) -> str | None:
        """ "python" or "bash" when kernelexec runs this block, else None."""
        if self.reading is not None:
            return self.reading.language
        return normalize_language(self.language)

    @property
    def is_code(self) -> bool:
        """False for a block that is not code (``NOT_CODE``, or an unlabelled block read
        as output or text), which is skipped."""
        if self.reading is not None:
            return self.reading.language is not None
        return self.runs_as is not None or self.language not in NOT_CODE

    @property
    def skip_reason(self) -> str:
        """Why a block that is not code is skipped."""
        return self.reading.reason if self.reading is not None else "not code"

    @property
    def shown_language(self) -> str:
        """The language a reader should be told: "python" for ```` ```py ```` or none."""
        return self.runs_as or self.language

    @property
    def first_line(self) -> str:
        """The first non-blank line of the code, stripped and cut to 80 characters."""
        line = next((s.strip() for s in self.code.splitlines() if s.strip()), "")
        if len(line) > _FIRST_LINE_CHARS:
            return line[: _FIRST_LINE_CHARS - 3] + "..."
        return line


@dataclass(frozen=True)
class BlockResult:
    """What became of one fenced block of a message.

    Attributes:
        index: the block's position among the message's fenced blocks, from 1.
        language: what it ran as ("python", "bash"), or its language as written
            when it did not run ("json", "javascript"; "" for an unlabelled block).
        line: the line of its opening fence in the message, from 1 (None for a
            block that did not come from a message).
        first_line: the first non-blank line of its code, cut to 80 characters.
        status: the execution's status; "skipped" for a block that is not
            code; "not_run" for a block after a failure (or an interruption).
        result: the execution, for a block that was sent to the session (a
            block in a language kernelexec cannot run gets its refusal here);
            None for a skipped or not-run block.
        message: why a block was skipped or not run, or what to do about a
            language kernelexec cannot run; None otherwise.
    """

    index: int
    language: str
    line: int | None
    first_line: str
    status: BlockStatus
    result: ExecutionResult | None = None
    message: str | None = None

    @classmethod
    def of(
        cls,
        block: CodeBlock,
        status: BlockStatus,
        result: ExecutionResult | None = None,
        message: str | None = None,
    ) -> BlockResult:
        return cls(
            index=block.index,
            language=block.shown_language,
            line=block.line,
            first_line=block.first_line,
            status=status,
            result=result,
            message=message,
        )

    @property
    def ok(self) -> bool:
        """The block ran without error, or was skipped as not code."""
        return self.status in ("ok", "skipped")

    @property
    def text(self) -> str:
        """What an LLM should read about this block: its result's text, or why it did not run."""
        if self.result is not None:
            extra = f"[kernelexec] {self.message}\n" if self.message else ""
            return self.result.text + extra
        language = self.language or "unlabelled"
        return f"[kernelexec] block {self.index} ({language}): {self.message}\n"

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serializable dict; ``result`` is ``ExecutionResult.to_dict()`` or None."""
        return {
            "index": self.index,
            "language": self.language,
            "line": self.line,
            "first_line": self.first_line,
            "status": self.status,
            "message": self.message,
            "result": self.result.to_dict() if self.result is not None else None,
        }


Execute = Callable[[CodeBlock], Awaitable[ExecutionResult]]
"""Runs one block that is code (a language kernelexec cannot run included)."""


async def run_blocks(blocks: Iterable[CodeBlock], execute: Execute) -> AsyncIterator[BlockResult]:
    """Each block's outcome in order, as it happens, stopping after the first failure.

    Blocks that are not code are skipped wherever they are; a block in a
    language kernelexec cannot run goes to ``execute`` too (the session
    refuses it and records the refusal), so it fails at its position with
    the blocks before it run. Every block after a failure is "not_run".
    """
    failed: BlockResult | None = None
    for block in blocks:
        if failed is not None:
            yield BlockResult.of(block, "not_run", message=f"not run: block {failed.index} failed")
        elif not block.is_code:
            yield BlockResult.of(block, "skipped", message=f"skipped: {block.skip_reason}")
        else:
            result = await execute(block)
            outcome = BlockResult.of(block, result.status, result, _unsupported(block))
            yield outcome
            if not result.ok:
                failed = outcome


def _unsupported(block: CodeBlock) -> str | None:
    if block.runs_as is not None:
        return None
    return (
        f"kernelexec runs python and bash blocks; a {block.language!r} block fails the message "
        "at its position. Blocks that are not code (text, output, console, json, yaml, csv, "
        "diff, ...) are skipped: label such a block that way."
    )


_ORDER: tuple[str, ...] = ("ok", "error", "timeout", "kernel_died", "cancelled")


def summarize(statuses: Sequence[str]) -> str:
    """``"4 blocks: 2 ok, 1 error, 1 not run"``: every status counted, in a fixed order.

    Args:
        statuses: one per block; besides a ``BlockStatus``, a caller may count
            its own (the command line counts "interrupted").
    """
    order = [*_ORDER, *sorted(set(statuses) - {*_ORDER, "skipped", "not_run"}), "skipped"]
    order.append("not_run")
    counts = [(name, statuses.count(name)) for name in order]
    parts = [f"{n} {name.replace('_', ' ')}" for name, n in counts if n]
    noun = "block" if len(statuses) == 1 else "blocks"
    return f"{len(statuses)} {noun}: {', '.join(parts)}" if parts else f"0 {noun}"


def extract_code_blocks(text: str, *, strict: bool = False) -> list[CodeBlock]:
    """Every fenced block of a message, in order (see the module's docstring for the rules).

    Args:
        text: the message.
        strict: read every unlabelled block as python, rather than telling
            code from output (``_unlabelled``).
    """
    blocks: list[CodeBlock] = []
    lines = text.splitlines()
    prose = ""  # the last line of prose since the last block: what introduces the next one
    i = 0
    while i < len(lines):
        opened = _OPEN.match(lines[i])
        fence = opened["fence"] if opened else ""
        if opened is None or (fence[0] == "`" and "`" in opened["info"]):
            prose = lines[i] if lines[i].strip() else prose
            i += 1
            continue
        indent = _columns(opened["lead"])
        start = i + 1
        body: list[str] = []
        i += 1
        while i < len(lines) and not _closes(lines[i], fence, indent):
            body.append(_dedent(lines[i], indent))
            i += 1
        language, code = _language(opened["info"]), "\n".join(body)
        reading = None if language or strict else read_unlabelled(code, prose)
        blocks.append(CodeBlock(len(blocks) + 1, language, code, start, reading))
        prose = ""
        i += 1
    return blocks


def _language(info: str) -> str:
    info = info.strip()
    found = _LANGUAGE.match(info)
    if found is None or info[found.end() :].lstrip().startswith("="):
        return ""  # attributes only (title="x.py"): an unlabelled block
    return found["name"].lower()


def _closes(line: str, fence: str, indent: int) -> bool:
    stripped = line.strip(" \t")
    return (
        len(stripped) >= len(fence)
        and set(stripped) == {fence[0]}
        # CommonMark allows three spaces more than the container's indentation;
        # less is the sloppy close at the margin that LLMs write.
        and _columns(line[: len(line) - len(line.lstrip(" \t"))]) <= indent + 3
    )


def _columns(lead: str) -> int:
    """The width of leading whitespace (or a list marker), tabs to the next multiple of 4."""
    column = 0
    for char in lead:
        column = column + 4 - column % 4 if char == "\t" else column + 1
    return column


def _dedent(line: str, columns: int) -> str:
    """``line`` without up to ``columns`` columns of leading whitespace."""
    column = 0
    for position, char in enumerate(line):
        if column >= columns or char not in " \t":
            return line[position:]
        width = 4 - column % 4 if char == "\t" else 1
        if column + width > columns:  # a tab straddling the indent keeps its rest
            return " " * (column + width - columns) + line[position + 1 :]
        column += width
    return ""
