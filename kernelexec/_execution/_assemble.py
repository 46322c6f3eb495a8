"""Turning what an execution left behind into an ExecutionResult."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .. import _workdir
from ._artifacts import OUTPUT_DIR, save_rich_outputs
from ._data import collect
from ._languages import SUPPORTED_LANGUAGES
from ._models import ExecutionError, ExecutionResult, Limits, Status
from ._reducer import Folded, stream_cut_marker
from ._render import cap_text, render_parts

__all__ = ["Assembly", "assemble", "check_code", "full_output_path", "refusal"]

_BASH_EXIT = re.compile(r"returned non-zero exit status (-?\d+)")


def full_output_path(stem: str) -> str:
    """Where an execution's complete output goes when the result is cut."""
    return f"{OUTPUT_DIR}/{stem}-output.txt"


@dataclass(frozen=True)
class Assembly:
    result: ExecutionResult
    outputs: list[dict[str, Any]]  # as the transcript should store them


def assemble(
    folded: Folded,
    *,
    status: Status,
    language: str,
    work_dir: Path,
    stem: str,
    limits: Limits,
    duration: float,
    notes: list[str],
    spilled: bool,
    restarted: bool = False,
) -> Assembly:
    """Saves the rich outputs as files and renders the concise text."""
    saved, problems = save_rich_outputs(folded.outputs, work_dir, stem)
    notes = list(notes) + problems + folded.notes
    full_output = full_output_path(stem) if spilled else None
    if folded.cut_chars:
        # Totals, not a count of cut characters: the text's own marker says
        # how much is missing from the text, and one number must not contradict another.
        where = f"; all of it is in {full_output}" if full_output else ""
        notes.append(
            f"stdout and stderr were {folded.stream_chars:,} characters, of which the result "
            f"keeps {folded.stream_chars - folded.cut_chars:,}, head and tail "
            f"(Limits.max_stream_chars){where}."
        )
    if folded.dropped_outputs:
        notes.append(
            f"{folded.dropped_outputs} display outputs past the limit of "
            f"{limits.max_outputs} were dropped."
        )
    error, shown = folded.error, folded.outputs
    if language == "bash" and error is not None and error.ename == "CalledProcessError":
        error, shown = _bash_failure(error, folded.outputs)
    message = " ".join(notes) or None
    # A stopped execution's KeyboardInterrupt traceback only points at whatever
    # line was running; the note below says what happened.
    errors = status not in ("timeout", "cancelled")
    parts = render_parts(shown, saved, errors=errors)
    text = "".join(parts)
    said = f"[kernelexec] {message}\n" if message else ""
    if len(text) + len(said) > limits.max_text_chars:
        if full_output is None:
            full_output, note = _save_text(work_dir, full_output_path(stem), text + said)
            if note:
                message = f"{message} {note}" if message else note
                said += f"[kernelexec] {note}\n"
        # The output is cut, kernelexec's notes are kept whole after it.
        budget = max(limits.max_text_chars - len(said), limits.max_text_chars // 2)
        text = cap_text(text, budget, full_output, marked=_stream_cut(folded, parts, text))
    text += said
    result = ExecutionResult(
        status=status,
        execution_count=folded.execution_count,
        stdout=folded.stdout,
        stderr=folded.stderr,
        outputs=folded.outputs,
        error=error,
        files=[path for paths in saved.values() for _, path in paths] + folded.saved_files,
        duration=round(duration, 6),
        text=text,
        restarted=restarted,
        message=message,
        full_output=full_output,
        language=language,
        usage=folded.usage,
        data=collect(folded.outputs, saved),
    )
    return Assembly(result=result, outputs=folded.outputs)


def _stream_cut(folded: Folded, parts: list[str], text: str) -> tuple[int, int, int] | None:
    """Where the streams' cut marker is in ``text``, and how many characters it stands for."""
    if folded.cut_at is None:
        return None
    start = sum(len(part) for part in parts[: folded.cut_at])
    marker = stream_cut_marker(folded.cut_chars)
    return (
        (start, start + len(marker), folded.cut_chars) if text.startswith(marker, start) else None
    )


def _save_text(work_dir: Path, relative: str, text: str) -> tuple[str | None, str | None]:
    """Writes the whole text beside the cut one: where it went, and a note if need be."""
    try:
        note = _workdir.write(work_dir, relative, text.encode("utf-8", "surrogatepass"))
    except OSError as exc:
        return None, f"The full text could not be saved to {relative}: {exc}."
    return relative, note


def refusal(ename: str, evalue: str, *, language: str) -> ExecutionResult:
    """The result for code kernelexec would not send to the kernel."""
    return ExecutionResult(
        status="error",
        error=ExecutionError(ename=ename, evalue=evalue),
        text=f"{ename}: {evalue}\n",
        message=evalue,
        language=language,
    )


def _bash_failure(
    error: ExecutionError, outputs: list[dict[str, Any]]
) -> tuple[ExecutionError, list[dict[str, Any]]]:
    # %%bash --raise-error reports a failed script as a Python traceback quoting
    # the whole script; the script's own stderr already says what went wrong.
    found = _BASH_EXIT.search(error.evalue)
    summary = f"bash exited with status {found.group(1) if found else 'non-zero'}"
    shown = [
        {"output_type": "error", "ename": "BashError", "evalue": summary, "traceback": [summary]}
        if o.get("output_type") == "error"
        else o
        for o in outputs
    ]
    return ExecutionError("BashError", summary, []), shown


def check_code(
    code: object, language: str | None, normalized: str | None, limits: Limits
) -> tuple[str, ExecutionResult | None]:
    """The code as text, and the refusal if it must not reach the kernel."""
    shown = normalized or "python"
    if isinstance(code, bytes):
        try:
            code = code.decode("utf-8")
        except UnicodeDecodeError as exc:
            return "", refusal(
                "InvalidInput", f"code is not valid UTF-8 ({exc}); nothing was run", language=shown
            )
    if not isinstance(code, str):
        return "", refusal(
            "InvalidInput", f"code must be text, not {type(code).__name__}", language=shown
        )
    if normalized is None:
        return code, refusal(
            "UnsupportedLanguage",
            f"cannot run {language!r} code; supported: {', '.join(SUPPORTED_LANGUAGES)}. "
            "Nothing was run.",
            language=str(language),
        )
    try:
        code.encode("utf-8")
    except UnicodeEncodeError as exc:
        return "", refusal(
            "InvalidInput",
            f"code is not valid Unicode text ({exc.reason} at "
            f"position {exc.start}); nothing was run",
            language=shown,
        )
    if len(code) > limits.max_code_chars:
        return "", refusal(
            "InvalidInput",
            f"code is {len(code):,} characters, over the limit of "
            f"{limits.max_code_chars:,} (Limits.max_code_chars); nothing was run",
            language=shown,
        )
    return code, None
