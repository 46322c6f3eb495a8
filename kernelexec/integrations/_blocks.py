"""Running a message's code blocks and folding their results into one answer.

Shared by the AutoGen and AG2 executors; imports neither framework.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from .._execution._ansi import strip_ansi
from .._execution._artifacts import SAVED_MIMETYPES, Saved
from .._execution._languages import normalize_language
from .._execution._models import ExecutionResult
from .._execution._render import collapse_carriage_returns, render_parts
from .._markdown._blocks import BlockResult, CodeBlock
from .._markdown._unlabelled import read_unlabelled

__all__ = [
    "TIMEOUT_EXIT_CODE",
    "TIMEOUT_LINE",
    "Combined",
    "combine",
    "exit_code",
    "one_per_output",
    "prepare",
    "quiet_pip",
    "read_blocks",
    "refused",
]

# "!pip install", "%pip install" (IPython) and a shell's "pip install", at a line's start.
_PYTHON_PIP = re.compile(r"^(\s*[!%]\s*pip3?\s+install)(?=\s)", re.MULTILINE)
_SHELL_PIP = re.compile(r"^(\s*(?:python3?\s+-m\s+)?pip3?\s+install)(?=\s)", re.MULTILINE)
# IPython's "!command" at a line's start in a shell block; "! command" (bash's negation) stays.
_SHELL_BANG = re.compile(r"^(\s*)!(?=[A-Za-z_./])", re.MULTILINE)
# How a saved file is named in ExecutionResult.text (see _execution/_render.py).
_SAVED_LINE = re.compile(
    r"^\[(?P<mimetype>[\w.+-]+/[\w.+-]+) saved to (?P<path>[^\]\n]+)\](?P<end>\n|\Z)", re.M
)
_KIND = {"text/html": "HTML", "application/pdf": "PDF"}
# One output shown in several formats (PIL: PNG and JPEG) is reported once, as
# the first of these its files have; the others stay in outputs/.
_PREFERRED = (".png", ".jpg", ".gif", ".svg", ".pdf", ".html")

# What the command line's `timeout` (and AutoGen's command-line executors) exit with.
TIMEOUT_EXIT_CODE = 124
# The line AG2's and AutoGen's command-line executors pair with 124, and users grep for.
TIMEOUT_LINE = "Timeout"


@dataclass(frozen=True)
class Combined:
    """The executions of one message, as the frameworks' code results want them.

    Attributes:
        exit_code: 0 when every block succeeded; 124 when one timed out; else 1.
        output: every block's text, in order, files named by absolute path.
        output_files: absolute paths of the files the blocks saved, one per
            output (a PNG rather than the same image as JPEG).
    """

    exit_code: int
    output: str
    output_files: list[Path]


def read_blocks(blocks: Iterable[tuple[str, str]]) -> list[CodeBlock]:
    """A framework's ``(language, code)`` blocks, read as ``run_markdown`` reads a message's.

    A block that is not code (json, text, output, ...) is skipped, as is an
    unlabelled one holding printed values or text; an unlabelled block of shell
    commands runs as bash (see ``_unlabelled``; the frameworks give no prose
    around a block, so there is no "Expected output:" to go by).
    """
    found: list[CodeBlock] = []
    for index, (language, code) in enumerate(blocks, start=1):
        name = (language or "").strip().lower()
        reading = None if name else read_unlabelled(code, "")
        found.append(CodeBlock(index, name, code, reading=reading))
    return found


def prepare(code: str, language: str) -> str:
    """The code as the kernel should get it: pip quiet, and a shell block's IPython-style
    ``!command`` lines as plain commands (which bash would not find), as AG2 runs them."""
    if normalize_language(language) == "bash":
        code = _SHELL_BANG.sub(r"\1", code)
    return quiet_pip(code, language)


def quiet_pip(code: str, language: str) -> str:
    """Adds ``-qqq`` to ``pip install`` lines, as AutoGen and AG2 do, so logs stay short."""
    normalized = normalize_language(language)
    pattern = _PYTHON_PIP if normalized == "python" else _SHELL_PIP if normalized else None
    if pattern is None:
        return code
    return pattern.sub(lambda m: m[1] if "-qqq" in _line_of(code, m) else m[1] + " -qqq", code)


def exit_code(result: ExecutionResult) -> int:
    """The exit code a framework shows for one execution."""
    if result.ok:
        return 0
    return TIMEOUT_EXIT_CODE if result.status == "timeout" else 1


def combine(outcomes: Sequence[ExecutionResult | BlockResult], work_dir: Path) -> Combined:
    """One answer for a message's blocks; the last one that ran decides the exit code.

    The text is the frameworks' own: each output's text as it came (a print's
    trailing newline kept), outputs and blocks joined by a newline, as
    AutoGen's ``JupyterCodeExecutor`` and AG2's IPython executor join them. A
    saved file's line reads ``Image data saved to /abs/path.png`` (or ``HTML
    data``, ``PDF data``), the line AG2's users grep for. A timeout's text
    ends with a ``Timeout`` line. A skipped block (not code) is a line saying
    so, as in ``BlockResult.text``; blocks not run after a failure are left
    out, as the frameworks leave them.
    """
    texts: list[str] = []
    files: list[Path] = []
    results: list[ExecutionResult] = []
    for outcome in outcomes:
        result = outcome.result if isinstance(outcome, BlockResult) else outcome
        if result is None:
            if isinstance(outcome, BlockResult) and outcome.status == "skipped":
                texts.append(outcome.text)
            continue
        results.append(result)
        shown = one_per_output(result.files)
        texts.append(_named_files(result, _framework_text(result), shown, work_dir))
        files.extend(work_dir / path for path in shown)
    code = exit_code(results[-1]) if results else 0
    output = "\n".join(texts)
    if code == TIMEOUT_EXIT_CODE:
        output += ("\n" if output and not output.endswith("\n") else "") + TIMEOUT_LINE
    return Combined(exit_code=code, output=output, output_files=files)


def refused(text: str) -> Combined:
    """The answer for blocks the approval function refused: nothing ran."""
    return Combined(exit_code=1, output=text, output_files=[])


def one_per_output(files: list[str]) -> list[str]:
    """The preferred file of each output, in order; ``outputs/0003-2.png`` and
    ``outputs/0003-2.jpg`` are one output."""
    by_stem: dict[str, list[str]] = {}
    for path in files:
        by_stem.setdefault(path.rsplit(".", 1)[0], []).append(path)
    return [min(group, key=_rank) for group in by_stem.values()]


def _rank(path: str) -> int:
    suffix = "." + path.rsplit(".", 1)[-1]
    return _PREFERRED.index(suffix) if suffix in _PREFERRED else len(_PREFERRED)


def _framework_text(result: ExecutionResult) -> str:
    """``result.text`` with its outputs joined the frameworks' way, when it can be rebuilt.

    kernelexec ends each output's text with a newline; the frameworks join the
    outputs' own texts with one. The rebuild is used only when rendering the
    outputs again gives ``result.text`` exactly, so a text that was capped or
    carries kernelexec's notes (a timeout's, say) is kept as it is.
    """
    saved = _saved_by_output(result)
    if saved is None:
        return result.text
    parts = render_parts(result.outputs, saved)
    if "".join(parts) != result.text:
        return result.text
    outputs = result.outputs
    pieces: list[str] = []
    carry_on = False  # this output carries on the previous one's stream
    for index, (output, part) in enumerate(zip(outputs, parts, strict=True)):
        if output.get("output_type") == "stream":
            # A stream's own text, not the newline kernelexec adds when it lacks one.
            text = collapse_carriage_returns(strip_ansi(_as_str(output.get("text", ""))))
            if carry_on and pieces:
                pieces[-1] += text
            elif text:
                pieces.append(text)
        elif part:
            pieces.append(part.removesuffix("\n"))
        after = outputs[index + 1] if index + 1 < len(outputs) else {}
        carry_on = output.get("output_type") == after.get("output_type") == "stream" and (
            output.get("name") == after.get("name")
        )
    return "\n".join(pieces)


def _saved_by_output(result: ExecutionResult) -> Saved | None:
    """Which files each output saved, as ``save_rich_outputs`` wrote them, in order."""
    files = iter(result.files)
    saved: Saved = {}
    for index, output in enumerate(result.outputs):
        data = output.get("data")
        if not isinstance(data, dict):
            continue
        present = [m for m in SAVED_MIMETYPES if m in data]
        pairs = [(mimetype, next(files, None)) for mimetype in present]
        if any(path is None for _, path in pairs):
            return None  # a file was not saved: the text says why; keep it
        if pairs:
            saved[index] = [(mimetype, path) for mimetype, path in pairs if path is not None]
    return saved


def _as_str(value: object) -> str:
    if isinstance(value, list):
        return "".join(str(v) for v in value)
    return value if isinstance(value, str) else str(value)


def _named_files(result: ExecutionResult, text: str, shown: list[str], work_dir: Path) -> str:
    """``text`` with each saved file's line in AG2's words, or gone if not shown."""

    def line(match: re.Match[str]) -> str:
        path = match["path"]
        if path not in result.files:
            return match[0]  # not our line: the code printed something that looks like it
        if path not in shown:
            return ""
        mimetype = match["mimetype"]
        kind = _KIND.get(mimetype, "Image" if mimetype.startswith("image/") else mimetype)
        return f"{kind} data saved to {work_dir / path}{match['end']}"

    return _SAVED_LINE.sub(line, text)


def _line_of(text: str, match: re.Match[str]) -> str:
    end = text.find("\n", match.end())
    return text[match.start() : end if end >= 0 else len(text)]
