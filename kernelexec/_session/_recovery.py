"""Recovery checkpoints (``checkpoint_every``): a kernel that dies gets its variables back.

After an execution that ends ``ok`` or ``error``, once ``checkpoint_every``
seconds have passed since the last one, the session checkpoints its kernel's
variables and imports (not its files: they stay in the work dir), replacing
the one before only once the new one is whole. It is kept in a private temp
folder of this process's (mode 0700, removed when the session closes), never
in the work dir: the kernel's code could plant a forged checkpoint there, or
a link that would have this process copy other files into the kernel's reach.

When the kernel then dies (a crash, its memory limit, a lost Ray node) and a
new one is started for the session, the next execution first loads that
checkpoint into it, and its result says what came back and from when.
Variables assigned after the checkpoint are lost, and the death's result
says so.

A restart asked for (``restart()``) is a fresh kernel, and loads nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import secrets
import shutil
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

from .._exceptions import CheckpointError, KernelexecError
from .._state._manifest import Checkpoint, note
from ._checkpointing import checkpoint_now, load_back
from ._transcript import note_cell

if TYPE_CHECKING:
    from ._async import AsyncSession

__all__ = ["RECOVERY", "after_execution", "discard", "on_death", "recover"]

RECOVERY = "recovery"  # the checkpoint's folder, in the session's private folder


def _folder(session: AsyncSession) -> Path:
    if session._recovery_root is None:
        session._recovery_root = Path(tempfile.mkdtemp(prefix="kernelexec-recovery-"))
    return session._recovery_root / RECOVERY


def discard(session: AsyncSession) -> None:
    """Removes the session's recovery checkpoint (the session closes)."""
    root, session._recovery_root = session._recovery_root, None
    if root is not None:
        shutil.rmtree(root, ignore_errors=True)


def _saved(session: AsyncSession) -> Checkpoint | None:
    if session._recovery_root is None:
        return None
    try:
        return Checkpoint.open(_folder(session))
    except CheckpointError:
        return None


async def after_execution(session: AsyncSession) -> str | None:
    """Checkpoints the kernel if one is due; a note if it failed, else None."""
    every = session._checkpoint_every
    last = session._recovery_at
    if every is None or (last is not None and time.monotonic() - last < every):
        return None
    folder = _folder(session)
    fresh = folder.with_name(f".{RECOVERY}-{secrets.token_hex(6)}")
    try:
        await checkpoint_now(session, fresh, False, 300.0, 30.0)
    except (KernelexecError, OSError) as exc:
        await asyncio.to_thread(shutil.rmtree, fresh, True)
        return f"The recovery checkpoint (checkpoint_every) could not be made: {exc}"
    session._recovery_at = time.monotonic()
    await asyncio.to_thread(_replace, fresh, folder)
    return None


def _replace(fresh: Path, folder: Path) -> None:
    """``fresh`` in ``folder``'s place; the old one removed after, never before."""
    old = folder.with_name(f".{RECOVERY}-old-{secrets.token_hex(6)}")
    with contextlib.suppress(FileNotFoundError):  # the first one: nothing to replace
        os.rename(folder, old)
    os.rename(fresh, folder)
    shutil.rmtree(old, ignore_errors=True)


def on_death(session: AsyncSession, lost: str) -> str:
    """What becomes of the state when the kernel died: ``lost``, or the recovery's promise."""
    saved = _saved(session) if session._checkpoint_every is not None else None
    if saved is None:
        return lost
    session._recover = True
    return (
        f"its variables as of the recovery checkpoint of {saved.created} come back in the new "
        "kernel (those assigned since are lost)"
    )


async def recover(session: AsyncSession) -> str | None:
    """Loads the recovery checkpoint into a kernel that replaced a dead one; says how it went."""
    if not session._recover:
        return None
    session._recover = False
    saved = _saved(session)
    if saved is None:
        return "The recovery checkpoint is gone: the new kernel starts empty."
    try:
        report = await load_back(session, saved)
    except (KernelexecError, OSError) as exc:
        return f"The recovery checkpoint could not be loaded into the new kernel: {exc}"
    report = dataclasses.replace(report, checkpoint=str(saved.path))
    session._transcript.add(note_cell(note(report, how="the kernel died; its state recovered")))
    kept = ", ".join(v.name for v in saved.variables[:20]) or "none"
    more = f" and {len(saved.variables) - 20} more" if len(saved.variables) > 20 else ""
    return (
        f"The kernel had died; the new kernel holds the variables of the recovery checkpoint "
        f"of {saved.created}: {kept}{more}."
    )
