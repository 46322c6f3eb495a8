"""What ``kernelexec run`` shows while blocks run: a person's view, or JSON lines.

The person's view keeps stdout for what the code printed (its stdout stream and
the text of its displays, as they happen) and puts kernelexec's own words on
stderr: a header per block, errors, saved files, notes and the closing summary.
So ``kernelexec run x.md > out.txt`` leaves exactly the program's output in the
file. Colour and the start-up line only when the stream is a terminal (and
``NO_COLOR`` is unset).

The JSON view prints one ``BlockResult.to_dict()`` per line on stdout as each
block ends, and a final line with the summary, the work dir and the transcript.
"""

from __future__ import annotations

import json
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from .._execution._ansi import strip_ansi
from .._execution._live import LiveOutput
from .._markdown._blocks import BlockResult, CodeBlock

__all__ = ["Ending", "JsonView", "TerminalView", "View"]

# A display's text/plain that says nothing once its image is saved as a file.
_OBJECT_REPR = re.compile(r"^<[^\n]*>$")
_RICH = ("image/", "application/pdf")


@dataclass(frozen=True)
class Ending:
    """How a run ended, for its summary.

    Attributes:
        line: the blocks counted, e.g. "3 blocks: 2 ok, 1 error (1.2 s)".
        code: the exit status.
        work_dir, transcript: where the run left its files (None if it made none).
        error: why kernelexec itself stopped, if it did.
    """

    line: str
    code: int
    work_dir: Path | None = None
    transcript: Path | None = None
    error: str | None = None


class _Stream:
    """One output stream: flushed at every write, and quiet once its reader has gone."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self.tty = _isatty(stream)
        self.colour = (
            self.tty and not os.environ.get("NO_COLOR") and os.environ.get("TERM") != "dumb"
        )
        self.at_line_start = True
        self._gone = False

    def write(self, text: str) -> None:
        if not text or self._gone:
            return
        try:
            try:
                self.stream.write(text)
            except UnicodeEncodeError:
                encoding = self.stream.encoding or "utf-8"
                self.stream.write(text.encode(encoding, "replace").decode(encoding))
            self.stream.flush()
        except BrokenPipeError:
            # `kernelexec run x.md | head`: the rest runs (its transcript stays
            # whole); Python's own flush at exit must not fail on the pipe either.
            self._gone = True
            with open(os.devnull, "w") as devnull:
                os.dup2(devnull.fileno(), self.stream.fileno())
            return
        self.at_line_start = text.endswith("\n")

    def paint(self, text: str, style: str) -> str:
        return f"\x1b[{style}m{text}\x1b[0m" if self.colour else text


def _isatty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


class View:
    """The hooks ``kernelexec run`` calls; this base shows nothing."""

    def __init__(self, total: int) -> None:
        self.total = total

    def starting(self) -> None:
        """The kernel is starting."""

    def started(self) -> None:
        """The kernel is up."""

    def header(self, block: CodeBlock) -> None:
        """``block`` is about to run."""

    def output(self, output: LiveOutput) -> None:
        """An output of the running block, as it happens (an ``on_output`` listener)."""

    def note(self, text: str) -> None:
        """Something the person at the terminal should know now."""

    def finished(self, outcome: BlockResult, *, interrupted: bool = False) -> None:
        """A block is done with (ran, skipped or not run)."""

    def summary(self, ending: Ending) -> None:
        """The run is over."""


class TerminalView(View):
    """Live output for a person; see the module's docstring."""

    def __init__(self, total: int, out: TextIO | None = None, err: TextIO | None = None) -> None:
        super().__init__(total)
        self.out = _Stream(out or sys.stdout)
        self.err = _Stream(err or sys.stderr)

    def starting(self) -> None:
        if self.err.tty:
            self.err.write(self.err.paint("starting the kernel...", "2"))

    def started(self) -> None:
        if self.err.tty:
            self.err.write("\r\x1b[K")
            self.err.at_line_start = True

    def header(self, block: CodeBlock) -> None:
        self._line(self._title(block, block.first_line), "1;36")

    def output(self, output: LiveOutput) -> None:
        if output.type == "stream":
            stream = self.err if output.get("name") == "stderr" else self.out
            stream.write(output.text if stream.tty else strip_ansi(output.text))
        elif output.type in ("display_data", "execute_result"):
            self.out.write(_display_text(output))
        # Errors are shown once the block is done, from its result (a failed
        # shell script's is a line, not a traceback quoting the script);
        # clear_output and display updates have no meaning on a scrolling terminal.

    def note(self, text: str) -> None:
        self._line(f"[kernelexec] {text}", "33")

    def finished(self, outcome: BlockResult, *, interrupted: bool = False) -> None:
        if outcome.status in ("skipped", "not_run"):
            reason = (outcome.message or "").removeprefix("skipped: ") or "not code"
            why = f"skipped ({reason})" if outcome.status == "skipped" else "not run"
            self._line(self._title(outcome, why), "2")
            return
        result = outcome.result
        if result is None:
            self._line(outcome.message or outcome.status, "33")
            return
        if interrupted:
            self._line("interrupted", "33")
        elif result.error is not None and result.status == "error":
            lines = result.error.traceback or [f"{result.error.ename}: {result.error.evalue}"]
            *body, last = "\n".join(lines).rstrip("\n").split("\n")
            if body:
                self._line("\n".join(body), "")
            self._line(last, "31")
        for path in result.files:
            self._line(f"saved {path}", "2")
        if interrupted:
            return
        said = result.error.evalue if result.error is not None else None
        for text in (result.message, outcome.message):
            if text and text != said:
                self._line(f"[kernelexec] {text}", "33")

    def summary(self, ending: Ending) -> None:
        style = "1;32" if ending.code == 0 else "1;33" if ending.code == 130 else "1;31"
        prefix = "" if self.err.colour else "[kernelexec] "
        self._line(f"{prefix}{ending.line}", style)
        if ending.work_dir is not None:
            self._line(f"{prefix}work dir:   {ending.work_dir}", "")
        if ending.transcript is not None:
            self._line(f"{prefix}transcript: {ending.transcript}", "")

    def _title(self, block: CodeBlock | BlockResult, what: str) -> str:
        language = block.language if isinstance(block, BlockResult) else block.shown_language
        language = language or "unlabelled"
        where = f", line {block.line}" if block.line is not None else ""
        if self.err.colour:
            return f"── [{block.index}/{self.total}] {language}{where}: {what}"
        return f"--- [{block.index}/{self.total}] {language}{where}: {what}"

    def _line(self, text: str, style: str) -> None:
        # On one terminal, output that did not end its line must not swallow ours.
        if self.out.tty and not self.out.at_line_start:
            self.out.write("\n")
        if not self.err.at_line_start:
            self.err.write("\n")
        self.err.write((self.err.paint(text, style) if style else text) + "\n")


class JsonView(View):
    """One JSON object per block on stdout, then a final line; a summary on stderr."""

    def __init__(self, total: int, out: TextIO | None = None, err: TextIO | None = None) -> None:
        super().__init__(total)
        self.out = _Stream(out or sys.stdout)
        self.err = _Stream(err or sys.stderr)

    def finished(self, outcome: BlockResult, *, interrupted: bool = False) -> None:
        self.out.write(json.dumps(outcome.to_dict(), ensure_ascii=False) + "\n")

    def note(self, text: str) -> None:
        self.err.write(f"[kernelexec] {text}\n")

    def summary(self, ending: Ending) -> None:
        final = {
            "summary": ending.line,
            "exit_code": ending.code,
            "work_dir": str(ending.work_dir) if ending.work_dir is not None else None,
            "transcript": str(ending.transcript) if ending.transcript is not None else None,
            "error": ending.error,
        }
        self.out.write(json.dumps(final, ensure_ascii=False) + "\n")
        self.err.write(f"[kernelexec] {ending.line}\n")
        if ending.work_dir is not None:
            self.err.write(f"[kernelexec] work dir: {ending.work_dir}\n")


def _display_text(output: LiveOutput) -> str:
    text = output.text
    data = output.get("data") or {}
    has_rich = any(str(m).startswith(_RICH) for m in data)
    if has_rich and _OBJECT_REPR.match(text.strip()):
        return ""  # "<Figure size 640x480 with 1 Axes>": the saved file is listed at the end
    return text
