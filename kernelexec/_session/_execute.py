"""One execution in a session: queued behind the session's lock, run, judged, recorded.

``kernelexec._execution`` runs the code and folds the kernel's messages into a
result; this adds what the session knows: its lock, its kernel's life (a
death restarts it, an interrupt that is not heeded too), the ``NNNN`` stem of
the files the execution writes, and the transcript cell. ``AsyncSession.execute``
calls ``execute``.
"""

from __future__ import annotations

import contextlib
import io
import os
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from .. import _telemetry, _workdir
from .._containment._hints import containment_note
from .._execution._assemble import assemble, check_code, full_output_path
from .._execution._background import ExecutionCancelled, mark_started
from .._execution._languages import kernel_source, normalize_language
from .._execution._live import OutputListener
from .._execution._models import ExecutionResult, Status
from .._execution._reducer import ExecutionReducer, Folded
from .._execution._run import InputAnswerer, Interrupts, Outcome, run_code
from ._lifecycle import STATE_LOST, ensure_kernel, revive_if_dead, schedule_restart
from ._recovery import after_execution, on_death, recover
from ._transcript import code_cell, note_cell

if TYPE_CHECKING:
    from ._async import AsyncSession

__all__ = ["execute"]


async def execute(
    session: AsyncSession,
    code: str | bytes,
    *,
    language: str | None,
    timeout: float | None,
    stdin: Sequence[str] | InputAnswerer | None,
    on_output: OutputListener | None,
) -> ExecutionResult:
    """The body of ``AsyncSession.execute`` (not in the background)."""
    normalized = normalize_language(language)
    text, refused = check_code(code, language, normalized, session.limits)
    async with session._lock:
        mark_started()  # a background execution is "running" from here
        if session._closed:
            return _cancelled(normalized or "python")
        if session._dead is not None:
            return _kernel_down(session._dead, normalized or "python")
        session._seq += 1
        # From here interrupt() is this execution's, its kernel still starting or not.
        session._interrupts = Interrupts()
        try:
            if refused is not None or normalized is None:
                assert refused is not None
                _record_refusal(session, refused, text, language)
                return refused
            return await _execute(
                session, text, normalized, timeout or session.timeout, stdin, on_output
            )
        finally:
            # The cell is in the file before its result is handed out: a
            # crash right after a result loses nothing, and a caller may
            # delete or copy the work dir as soon as it has the result.
            session._interrupts = None
            await session._transcript.flush()


@_telemetry.execution
async def _execute(
    session: AsyncSession,
    code: str,
    language: str,
    timeout: float,
    stdin: Sequence[str] | InputAnswerer | None,
    on_output: OutputListener | None,
) -> ExecutionResult:
    started_wall, started = time.time(), time.monotonic()
    await ensure_kernel(session)
    revived = await revive_if_dead(session)
    if session._dead is not None:
        return _kernel_down(session._dead, language)
    recovered = await recover(session)
    stem = f"{session._seq:04d}"
    source = kernel_source(code, language)
    spill_notes: list[str] = []
    limits = session.limits

    def open_spill() -> Any:
        # Through _workdir: a link the kernel planted at the name is replaced, not followed.
        try:
            raw, moved = _workdir.create(session.work_dir, full_output_path(stem))
        except OSError as exc:
            spill_notes.append(f"The full output could not be saved: {exc}.")
            return open(os.devnull, "w")
        spill_notes.extend([moved] if moved else [])
        return io.TextIOWrapper(raw, encoding="utf-8", errors="surrogatepass")

    def reducer_factory(msg_id: str) -> ExecutionReducer:
        return ExecutionReducer(
            msg_id,
            limits=limits,
            spill=open_spill,
            spill_name=full_output_path(stem),
            output_begins=session._announces is not True,
        )

    session._running = True
    try:
        outcome = await run_code(
            session._backend,
            source,
            reducer_factory=reducer_factory,
            timeout=timeout,
            grace=session.interrupt_grace,
            stdin=stdin,
            on_output=on_output,
            interrupts=session._interrupts,
        )
    finally:
        session._running = False
    if outcome.reducer.announced or outcome.reducer.replied:
        session._announces = outcome.reducer.announced
    status, notes, restarted = _judge(session, outcome, timeout)
    notes.extend(spill_notes)
    if recovered:
        notes.insert(0, recovered)
    if revived:
        notes.insert(0, revived)
        restarted = True
    if status in ("ok", "error"):
        failed = await after_execution(session)
        if failed is not None:
            notes.append(failed)
    folded = outcome.reducer.finish()
    if status in ("ok", "error"):  # a shell command's failure prints, and is "ok"
        note = _contained(session, source, folded)
        if note is not None:
            notes.append(note)
    assembly = assemble(
        folded,
        status=status,
        language=language,
        work_dir=session.work_dir,
        stem=stem,
        limits=limits,
        duration=time.monotonic() - started,
        notes=notes,
        spilled=outcome.reducer.spilled,
        restarted=restarted,
    )
    result = assembly.result
    session._transcript.add(
        code_cell(
            source,
            assembly.outputs,
            execution_count=result.execution_count,
            started=started_wall,
            finished=time.time(),
            failed=status != "ok",
            usage=result.usage,
            kernelexec={
                "status": status,
                "language": language,
                "duration": result.duration,
                "files": result.files,
                "restarted": restarted,
                "message": result.message,
            },
        )
    )
    if status == "kernel_died":
        session._transcript.add(note_cell(f"*kernelexec: {result.message}*"))
    if outcome.ending == "cancelled":
        raise ExecutionCancelled(result)  # a CancelledError that keeps the result
    return result


def _contained(session: AsyncSession, code: str, folded: Folded) -> str | None:
    """The note saying a failure came from the session's sandbox, naming what allows it."""
    sandbox = session.sandbox
    if sandbox is None:
        return None
    text = f"{folded.stdout[-4000:]}\n{folded.stderr[-4000:]}"
    if folded.error is not None:
        text += f"\n{folded.error.ename}: {folded.error.evalue}\n"
        text += "\n".join(folded.error.traceback[-5:])
    return containment_note(
        sandbox, work_dir=session.work_dir, code=code, text=text, raised=folded.error is not None
    )


def _judge(
    session: AsyncSession, outcome: Outcome, timeout: float
) -> tuple[Status, list[str], bool]:
    """The execution's status, the notes for its message, and whether the kernel restarted."""
    notes = list(outcome.notes)
    reducer = outcome.reducer
    # close() interrupts a running cell: the KeyboardInterrupt it ends with is ours.
    stopped_by_close = reducer.error is not None and reducer.error.ename == "KeyboardInterrupt"
    if session._closed and (outcome.ending != "done" or stopped_by_close):
        notes.append("The session was closed while this code ran.")
        return "cancelled", notes, False
    if outcome.ending == "done":
        return ("error" if reducer.error is not None else "ok"), notes, False
    if outcome.ending == "died":
        reason = session._backend.exit_reason() or "cause unknown"
        then = (
            "A new kernel is starting for the next execution."
            if session.auto_restart
            else "Call restart() to start a new kernel."
        )
        lost = on_death(session, STATE_LOST)
        notes.append(f"The kernel died ({reason}) while running this code; {lost}. {then}")
        session._kernel_up = False
        if session.auto_restart:
            schedule_restart(session)
        else:
            session._dead = f"The kernel died ({reason})."
        return "kernel_died", notes, session.auto_restart
    what = f"Timed out after {timeout:g} s" if outcome.ending == "timeout" else "Cancelled"
    if outcome.needs_restart:
        notes.append(
            f"{what}; the kernel did not stop within {session.interrupt_grace:g} s of an "
            f"interrupt, so it was restarted and {STATE_LOST}."
        )
        session._kernel_up = False
        schedule_restart(session)
        restarted = True
    else:
        notes.append(f"{what}; the kernel was interrupted and its state is kept.")
        restarted = False
    status: Status = "timeout" if outcome.ending == "timeout" else "cancelled"
    return status, notes, restarted


def _record_refusal(
    session: AsyncSession, result: ExecutionResult, code: str, language: str | None
) -> None:
    with contextlib.suppress(UnicodeEncodeError):
        code.encode("utf-8")
        session._transcript.add(
            note_cell(
                code[:10_000],
                kind="raw",
                kernelexec={"status": "error", "language": language, "message": result.message},
            )
        )


def _cancelled(language: str) -> ExecutionResult:
    message = "The session was closed before this code ran."
    return ExecutionResult(
        status="cancelled", text=f"[kernelexec] {message}\n", message=message, language=language
    )


def _kernel_down(why: str, language: str) -> ExecutionResult:
    message = f"{why} auto_restart is off: call restart() to start a new kernel. Nothing was run."
    return ExecutionResult(
        status="kernel_died", text=f"[kernelexec] {message}\n", message=message, language=language
    )
