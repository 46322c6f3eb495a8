"""Turning what an execution left behind into an ExecutionResult."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import _workdir
from ._artifacts import OUTPUT_DIR, save_rich_outputs
from ._models import ExecutionError, ExecutionResult, Limits, Status
from ._reducer import Folded
from ._render import cap_text, render_outputs

__all__ = ["Assembly", "assemble", "full_output_path", "refusal"]

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
        where = f"; all of it is in {full_output}" if full_output else ""
        notes.append(f"{folded.cut_chars:,} characters of output were cut from the result{where}.")
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
    text = render_outputs(shown, saved, errors=status not in ("timeout", "cancelled"))
    if message:
        text += f"[kernelexec] {message}\n"
    if len(text) > limits.max_text_chars:
        if full_output is None:
            full_output, note = _save_text(work_dir, full_output_path(stem), text)
            if note:
                message = f"{message} {note}" if message else note
                text += f"[kernelexec] {note}\n"
        text = cap_text(text, limits.max_text_chars, full_output, already_cut=folded.cut_chars)
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
    )
    return Assembly(result=result, outputs=folded.outputs)


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
