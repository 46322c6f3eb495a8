"""A session's state checkpointed, restored, forked, kept across a restart, replayed.

The bodies of ``AsyncSession.checkpoint``, ``.restore``, ``.fork``,
``.restart(keep_state=True)`` and ``.from_transcript``. The steps are ``kernelexec._state``'s, which
know a backend and a work dir; this adds the session's: its lock (held while
its state is copied), its transcript (each begins with a note saying where its
state came from) and the new session, made by the class it is given
(``type(parent)`` for a fork), so nothing here imports ``AsyncSession``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import shutil
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .._backends import LocalBackend
from .._exceptions import (
    CheckpointError,
    ConfigurationError,
    KernelStartError,
    SessionBusyError,
)
from .._state import _disk
from .._state._fork import FORK_METHODS, ForkMethod, ForkReport, copy_files
from .._state._manifest import Checkpoint, RestoreReport, note
from .._state._restore import copy_files_out, load_into
from ._checkpointing import check_checkpointable, checkpoint_now, kernel_dir, load_back
from ._lifecycle import STATE_LOST, ensure_kernel, prepare_work_dir
from ._replay import read_code_cells, replay_into
from ._transcript import note_cell

if TYPE_CHECKING:
    from ._async import AsyncSession

__all__ = [
    "fork_session",
    "replay_session",
    "restart_keeping_state",
    "restore_session",
]


def _fork_options(session: AsyncSession) -> dict[str, Any]:
    """What a fork of the session is made with, its backend aside."""
    return {
        "timeout": session.timeout,
        "limits": session.limits,
        "interrupt_grace": session.interrupt_grace,
        "auto_restart": session.auto_restart,
        "notebook": session.notebook_path.name,
        "startup_timeout": session._startup_timeout,
        "checkpoint_every": session._checkpoint_every,
    }


async def fork_session(
    parent: AsyncSession,
    work_dir: str | Path | None,
    *,
    wait: bool,
    method: ForkMethod = "auto",
    max_bytes: int | None = None,
) -> AsyncSession:
    """The body of ``AsyncSession.fork``; the child is of the parent's class."""
    if method not in FORK_METHODS:
        raise ConfigurationError(
            f"method={method!r}: use one of {', '.join(repr(m) for m in FORK_METHODS)}"
        )
    parent._check_open()
    on_node = getattr(parent._backend, "forks_on_node", False)
    if not on_node:
        check_checkpointable(parent)
    if method == "process" and not getattr(parent._backend, "forks_as_process", False):
        raise ConfigurationError(
            f"a {type(parent._backend).__name__} kernel cannot be forked as a process; "
            "use method='auto' or 'checkpoint'"
        )
    if not wait and parent._lock.locked():
        raise SessionBusyError(
            "the session is running an execution; fork(wait=True) waits for it to end"
        )
    async with parent._lock:
        await ensure_kernel(parent)
        if not await parent._backend.is_alive():
            raise KernelStartError("the kernel has died; there is no state to fork")
        backend = parent._backend
        can_fork = isinstance(backend, LocalBackend) and backend.can_fork()
        contained = parent.sandbox is not None
        if method == "process" and contained:
            raise ConfigurationError(
                "a contained kernel cannot be forked as a process: the copy would keep its "
                "file access, which only narrows, so it could not write a work dir of its "
                "own; use method='auto' or 'checkpoint', or a session with sandbox=False"
            )
        if method == "process" and not can_fork:
            raise ConfigurationError(
                f"this {type(backend).__name__} kernel cannot be forked as a process "
                "(another kernelspec's, or no os.pidfd_open); use method='auto' or 'checkpoint'"
            )
        target = prepare_work_dir(work_dir)
        if target.resolve() == parent.work_dir.resolve():
            raise ConfigurationError("a fork needs a work dir of its own, not its parent's")
        await parent._transcript.flush()
        files = await asyncio.to_thread(
            copy_files, parent.work_dir, parent.notebook_path, target, max_bytes
        )
        options = _fork_options(parent)
        child: AsyncSession | None = None
        left_behind: tuple[str, ...] = ()
        if method == "checkpoint":
            reason: str | None = "a checkpoint was asked for (method='checkpoint')"
        elif on_node:
            reason = (
                f"a {type(backend).__name__} kernel is forked on its node, by checkpointing it "
                "into a new kernel there"
            )
        elif contained:
            reason = (
                "the kernel is contained, and a process fork would keep its file access "
                "(sandbox=False forks the process)"
            )
        elif not can_fork:
            reason = f"a {type(backend).__name__} kernel cannot be forked as a process"
        else:
            assert isinstance(backend, LocalBackend)
            made = await backend.fork(cwd=target, env=parent._env, force=method == "process")
            if made.backend is not None:
                child = type(parent)(target, backend=made.backend, **options)
                child._env = dict(parent._env)
                child._kernel_up = True
                left_behind, reason = tuple(h.text for h in made.hazards), None
            else:
                reason = "; ".join(h.text for h in made.hazards if h.blocks)
        if child is None and on_node:
            child, copied, left_behind = await _on_node(parent, target, options, max_bytes)
            files += copied
        elif child is None:
            child, left_behind = await _by_checkpoint(parent, target, options, max_bytes)
        report = ForkReport(
            parent_work_dir=str(parent.work_dir),
            parent_transcript=str(parent.notebook_path),
            parent_cells=parent._seq,
            method="process" if reason is None else "checkpoint",
            files=files,
            left_behind=left_behind,
            reason=reason,
        )
        child.fork_report = report
        try:
            _begin_transcript(child, parent, report)
            await child._transcript.flush()
        except BaseException:
            # Cancelled (or failed) with the new kernel running: nobody would hold it.
            await asyncio.shield(child.close())
            raise
        return child


async def _on_node(
    parent: AsyncSession, target: Path, options: dict[str, Any], max_bytes: int | None
) -> tuple[AsyncSession, int, tuple[str, ...]]:
    """A fork made by the kernel's node, where its files and variables are (a Ray
    kernel without shared storage): the new session, the files copied there, what
    did not come."""
    made, files, left_behind = await parent._backend.fork_on_node(  # type: ignore[attr-defined]
        cwd=target, env=parent._env, max_bytes=max_bytes, timeout=300.0, variable_timeout=30.0
    )
    child = type(parent)(target, backend=made, **options)
    child._env = dict(parent._env)
    child._kernel_up = True
    return child, files, tuple(left_behind)


async def _by_checkpoint(
    parent: AsyncSession, target: Path, options: dict[str, Any], max_bytes: int | None
) -> tuple[AsyncSession, tuple[str, ...]]:
    fresh = getattr(parent._backend, "fresh", None)
    if fresh is None:
        raise KernelStartError(
            f"a {type(parent._backend).__name__} kernel can neither be forked nor made again"
        )
    folder = Path(tempfile.mkdtemp(prefix="kernelexec-fork-"))
    try:
        checkpoint = await checkpoint_now(parent, folder, False, 300.0, 30.0, max_bytes=max_bytes)
        child = await type(parent).restore(checkpoint, target, backend=fresh(), **options)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    report = child.restore_report
    skipped = () if report is None else report.skipped
    return child, tuple(f"{s.name} ({s.type}): {s.reason}" for s in skipped)


def _begin_transcript(child: AsyncSession, parent: AsyncSession, report: ForkReport) -> None:
    how = (
        "forked (the kernel process, copy-on-write)"
        if report.method == "process"
        else f"checkpointed and restored ({report.reason})"
    )
    text = (
        f"**Forked** from the session in `{report.parent_work_dir}` after its cell "
        f"{report.parent_cells} (transcript `{report.parent_transcript}`): {how}. "
        f"{report.files} files copied. The cells up to the next note are the parent's, "
        "run in the parent's kernel; this kernel started with their state."
    )
    if report.left_behind:
        text += "\n\nNot carried over: " + "; ".join(report.left_behind) + "."
    child._transcript.add(note_cell(text, kernelexec={"fork": report.to_dict()}))
    for cell in parent._transcript.cells_on_disk():
        child._transcript.add(cell)
    child._transcript.add(note_cell("**The fork's own cells** begin here."))
    child._seq = max(child._seq, parent._seq)


async def restore_session(
    cls: type[AsyncSession],
    checkpoint: Checkpoint | str | Path,
    work_dir: str | Path | None,
    *,
    load_timeout: float,
    variable_timeout: float,
    options: dict[str, Any],
) -> AsyncSession:
    """The body of ``AsyncSession.restore``."""
    path = checkpoint.path if isinstance(checkpoint, Checkpoint) else checkpoint
    saved = Checkpoint.open(path)  # a bad checkpoint fails before any kernel starts
    session = cls(work_dir, **options)
    try:
        copied = await asyncio.to_thread(copy_files_out, saved, session.work_dir)
        await session.start()
        async with session._lock:
            report = await load_into(
                session._backend,
                saved,
                work_dir=session.work_dir,
                kernel_dir=kernel_dir(session),
                on_mismatch="refuse",
                timeout=load_timeout,
                variable_timeout=variable_timeout,
                files=copied,
            )
            parent = saved.manifest["parent"]
            session._seq = max(session._seq, int(parent.get("cells", 0)))
            how = (
                f"restored from checkpoint {saved.path} (made {saved.created} from work dir "
                f"{parent.get('work_dir')}, transcript {parent.get('transcript')})"
            )
            session._transcript.add(note_cell(note(report, how=how)))
            await session._transcript.flush()
    except BaseException:
        await session.close()
        raise
    session.restore_report = report
    return session


async def replay_session(
    cls: type[AsyncSession],
    path: str | Path,
    work_dir: str | Path | None,
    *,
    until: int | None,
    include_failed: bool,
    options: dict[str, Any],
) -> AsyncSession:
    """The body of ``AsyncSession.from_transcript``: a new session, a notebook replayed into it."""
    source = Path(path).expanduser().resolve()
    cells = read_code_cells(source)  # a bad notebook fails before any kernel starts
    session = cls(work_dir, **options)
    if session.notebook_path.resolve() == source:
        raise ConfigurationError(
            f"{source} is the new session's own transcript; replay into another work_dir"
        )
    await session.start()
    try:
        session.replay_report = await replay_into(
            session, source, cells, until=until, include_failed=include_failed
        )
    except BaseException:
        await session.close()
        raise
    return session


async def restart_keeping_state(session: AsyncSession) -> RestoreReport:
    """Checkpoint, restart, restore: ``restart(keep_state=True)``; the session's lock is held."""
    folder = Path(tempfile.mkdtemp(prefix="kernelexec-keep-"))
    try:
        saved = await checkpoint_now(session, folder, False, 300.0, 30.0)
        # Before the restart: a restore with no room to stage its files would lose the state.
        _disk.check(
            saved.size,
            session.work_dir,
            budget=None,
            what="staging the state to keep across the restart",
            setting="",
        )
        await session._backend.restart()
        try:
            report = await load_back(session, saved)
        except CheckpointError as exc:
            session._transcript.add(
                note_cell(f"*kernelexec: kernel restarted on request; {STATE_LOST}: {exc}*")
            )
            await session._transcript.flush()
            raise
    finally:
        await asyncio.to_thread(shutil.rmtree, folder, True)
    report = dataclasses.replace(report, checkpoint="")
    session._transcript.add(note_cell(note(report, how="kernel restarted on request, state kept")))
    await session._transcript.flush()
    return report
