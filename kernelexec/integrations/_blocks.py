"""Running a message's code blocks and folding their results into one answer.

Shared by the AutoGen and AG2 executors; imports neither framework.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from .._languages import normalize_language
from .._models import ExecutionResult

__all__ = [
    "TIMEOUT_EXIT_CODE",
    "Combined",
    "combine",
    "exit_code",
    "one_per_output",
    "quiet_pip",
    "refused",
]

# "!pip install", "%pip install" (IPython) and a shell's "pip install", at a line's start.
_PYTHON_PIP = re.compile(r"^(\s*[!%]\s*pip3?\s+install)(?=\s)", re.MULTILINE)
_SHELL_PIP = re.compile(r"^(\s*(?:python3?\s+-m\s+)?pip3?\s+install)(?=\s)", re.MULTILINE)
# How a saved file is named in ExecutionResult.text (see _render.py).
_SAVED_LINE = re.compile(
    r"^\[(?P<mimetype>[\w.+-]+/[\w.+-]+) saved to (?P<path>[^\]\n]+)\](?:\n|\Z)", re.M
)
_KIND = {"text/html": "HTML", "application/pdf": "PDF"}
# One output shown in several formats (PIL: PNG and JPEG) is reported once, as
# the first of these its files have; the others stay in outputs/.
_PREFERRED = (".png", ".jpg", ".gif", ".svg", ".pdf", ".html")

# What the command line's `timeout` (and AutoGen's command-line executors) exit with.
TIMEOUT_EXIT_CODE = 124


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


def combine(results: Sequence[ExecutionResult], work_dir: Path) -> Combined:
    """One answer for the blocks that ran; the last one decides the exit code.

    A saved file's line reads ``Image data saved to /abs/path.png`` (or ``HTML
    data``, ``PDF data``), the line AG2's users grep for.
    """
    texts: list[str] = []
    files: list[Path] = []
    for result in results:
        shown = one_per_output(result.files)
        texts.append(_named_files(result, shown, work_dir))
        files.extend(work_dir / path for path in shown)
    code = exit_code(results[-1]) if results else 0
    return Combined(
        exit_code=code, output="\n".join(t.rstrip("\n") for t in texts), output_files=files
    )


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


def _named_files(result: ExecutionResult, shown: list[str], work_dir: Path) -> str:
    """``result.text`` with each saved file's line in AG2's words, or gone if not shown."""

    def line(match: re.Match[str]) -> str:
        path = match["path"]
        if path not in result.files:
            return match[0]  # not our line: the code printed something that looks like it
        if path not in shown:
            return ""
        mimetype = match["mimetype"]
        kind = _KIND.get(mimetype, "Image" if mimetype.startswith("image/") else mimetype)
        return f"{kind} data saved to {work_dir / path}\n"

    return _SAVED_LINE.sub(line, result.text)


def _line_of(text: str, match: re.Match[str]) -> str:
    end = text.find("\n", match.end())
    return text[match.start() : end if end >= 0 else len(text)]
