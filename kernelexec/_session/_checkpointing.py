"""Checkpointing a session's kernel: where its work dir is for it, and whether it can be.

Shared by ``_state.py`` (checkpoint, fork, restart keeping state) and
``_recovery.py`` (recovery checkpoints).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from .._backends import DockerBackend
from .._exceptions import CheckpointError
from .._state import _checkpoint
from .._state._manifest import Checkpoint, RestoreReport
from .._state._restore import load_into

if TYPE_CHECKING:
    from ._async import AsyncSession

__all__ = ["check_checkpointable", "checkpoint_now", "kernel_dir", "load_back"]


def kernel_dir(session: AsyncSession) -> str:
    """The work dir as the session's kernel sees it."""
    return "/workspace" if isinstance(session._backend, DockerBackend) else str(session.work_dir)


def check_checkpointable(session: AsyncSession) -> None:
    """Refuses, saying why, a checkpoint of a kernel whose files this machine cannot reach."""
    if not getattr(session._backend, "checkpoints", True):
        raise CheckpointError(
            "this kernel runs in a folder of its Ray node's own, out of this machine's reach, "
            "so it cannot be checkpointed, restored or restarted keeping its state (a fork "
            "is made on its node): give "
            "RayBackend(shared_work_dirs=True) with work dirs on storage every node mounts "
            "(kernelexec serve: --ray-shared-work-root)"
        )


async def checkpoint_now(
    session: AsyncSession,
    path: str | Path | None,
    files: bool,
    timeout: float,
    variable_timeout: float,
    *,
    max_bytes: int | None = None,
) -> Checkpoint:
    """Checkpoints the session's kernel (and files); the session's lock is held."""
    check_checkpointable(session)
    return await _checkpoint.take(
        session._backend,
        work_dir=session.work_dir,
        kernel_dir=kernel_dir(session),
        path=path,
        notebook=session.notebook_path,
        cells=session._seq,
        files=files,
        timeout=timeout,
        variable_timeout=variable_timeout,
        max_bytes=max_bytes,
    )


async def load_back(session: AsyncSession, saved: Checkpoint) -> RestoreReport:
    """Loads a checkpoint of this session's own into its new kernel (a variable whose
    package changed version is left behind, not refused)."""
    return await load_into(
        session._backend,
        saved,
        work_dir=session.work_dir,
        kernel_dir=kernel_dir(session),
        on_mismatch="skip",
        timeout=300.0,
        variable_timeout=30.0,
    )
