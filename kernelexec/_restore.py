"""Restoring a checkpoint into a session: ``AsyncSession.restore``, ``restart(keep_state=True)``."""

from __future__ import annotations

import asyncio
import dataclasses
import shutil
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from . import _checkpoint, _disk
from ._checkpoint import Checkpoint, RestoreReport
from ._exceptions import CheckpointError
from ._transcript import note_cell

if TYPE_CHECKING:
    from ._session import AsyncSession

__all__ = ["restart_keeping_state", "restore_session"]


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
        copied = await asyncio.to_thread(_checkpoint.copy_files_out, saved, session.work_dir)
        await session.start()
        async with session._lock:
            report = await _checkpoint.load_into(
                session._backend,
                saved,
                work_dir=session.work_dir,
                kernel_dir=session._kernel_dir(),
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
            session._transcript.add(note_cell(_checkpoint.note(report, how=how)))
            await session._transcript.flush()
    except BaseException:
        await session.close()
        raise
    session.restore_report = report
    return session


async def restart_keeping_state(session: AsyncSession) -> RestoreReport:
    """Checkpoint, restart, restore: ``restart(keep_state=True)``; the session's lock is held."""
    from ._session import STATE_LOST

    folder = Path(tempfile.mkdtemp(prefix="kernelexec-keep-"))
    try:
        saved = await session._checkpoint_now(folder, False, 300.0, 30.0)
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
            report = await _checkpoint.load_into(
                session._backend,
                saved,
                work_dir=session.work_dir,
                kernel_dir=session._kernel_dir(),
                on_mismatch="skip",
                timeout=300.0,
                variable_timeout=30.0,
            )
        except CheckpointError as exc:
            session._transcript.add(
                note_cell(f"*kernelexec: kernel restarted on request; {STATE_LOST}: {exc}*")
            )
            await session._transcript.flush()
            raise
    finally:
        await asyncio.to_thread(shutil.rmtree, folder, True)
    report = dataclasses.replace(report, checkpoint="")
    session._transcript.add(
        note_cell(_checkpoint.note(report, how="kernel restarted on request, state kept"))
    )
    await session._transcript.flush()
    return report
