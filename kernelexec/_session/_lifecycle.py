"""A session's kernel: started (from its pool, in its environment), revived, restarted.

A session's kernel is up, down for a restart under way (``_restarting``, run in
the background so that a death's result comes at once), or dead and left so
(``_dead``, when ``auto_restart`` is off). These functions move it between
those states; ``AsyncSession`` holds them, and its lock, and calls them.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
import tempfile
import warnings
from pathlib import Path
from typing import TYPE_CHECKING

from .. import _telemetry
from .._backends import LocalBackend
from .._exceptions import ConfigurationError
from .._venvs._venv import ensure_env
from ._pool import KernelConfig
from ._recovery import discard, on_death
from ._transcript import note_cell

if TYPE_CHECKING:
    from ._async import AsyncSession

__all__ = [
    "STATE_LOST",
    "await_pending_restart",
    "close_session",
    "ensure_kernel",
    "local_backend",
    "prepare_work_dir",
    "revive_if_dead",
    "schedule_restart",
    "warn",
]

STATE_LOST = "all earlier state (variables, imports) is gone"
_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep  # kernelexec/


async def close_session(session: AsyncSession) -> None:
    """The body of ``AsyncSession.close``: the kernel (and its children) shut down."""
    if session._closed:
        return
    session._closed = True
    if session._running:
        with contextlib.suppress(Exception):
            await session._backend.interrupt()
    try:
        await asyncio.wait_for(session._lock.acquire(), session.interrupt_grace)
        session._lock.release()
    except asyncio.TimeoutError:
        pass  # the shutdown below ends the stuck execution
    restarting = session._restarting
    if restarting is not None:
        restarting.cancel()
        with contextlib.suppress(BaseException):
            await restarting
    await session._backend.shutdown()
    session._kernel_up = False
    discard(session)
    # Synced, not only written: a power loss after a session's close keeps its transcript.
    await session._transcript.settle()


async def ensure_kernel(session: AsyncSession) -> None:
    """Starts the session's kernel unless it is up: a pooled one, else its own."""
    session._check_open()
    await await_pending_restart(session)
    if not session._kernel_up:
        with _telemetry.kernel_start(session) as traced:
            pool = session._pool
            taken = await pool.take(session.work_dir) if pool is not None else None
            session._pool = None  # a restart starts this session's own kernel, cold
            if taken is not None:
                session._backend = taken
            else:
                await _make_environment(session)
                await session._backend.start(cwd=session.work_dir, env=session._env)
            _telemetry.note_kernel(traced, session._backend, pooled=taken is not None)
        session._kernel_up = True
        policy = session.sandbox
        session._transcript.note("sandbox", None if policy is None else policy.to_dict())


async def _make_environment(session: AsyncSession) -> None:
    """Makes (or finds made) the environment asked for, and a kernel to run in it."""
    request = session._env_request
    if request is None:
        return
    # In a thread: a build takes seconds to minutes, and other sessions run meanwhile.
    python = await ensure_env(request)
    session._check_open()  # closed while the environment was being made
    session._env_request = None  # only once made: a failed build is tried again
    session._backend = local_backend(
        session._config, python, zygote=session._zygote, startup_timeout=session._startup_timeout
    )


def local_backend(
    config: KernelConfig, python: str | None, *, zygote: bool | None, startup_timeout: float
) -> LocalBackend:
    """A local kernel of ``config`` on ``python`` (None: the configured one)."""
    return LocalBackend(
        kernel_name=config.kernel_name,
        python=python,
        startup_timeout=startup_timeout,
        preload=config.preload,
        zygote=zygote,
        max_message_bytes=config.limits.max_message_bytes,
        sandbox=config.policy() or False,
    )


async def revive_if_dead(session: AsyncSession) -> str | None:
    """Restarts a kernel that died between executions; says so, or None."""
    backend = session._backend
    if await backend.is_alive():
        return None
    reason = backend.exit_reason() or "cause unknown"
    lost = on_death(session, STATE_LOST)
    said = f"The kernel had died since the last execution ({reason}); {lost}."
    if not session.auto_restart:
        session._dead = said
        return None
    session._transcript.add(note_cell(f"*kernelexec: {said} A new kernel was started.*"))
    await _telemetry.kernel_restart(session, backend.restart())
    return f"{said} A new kernel was started before this code ran."


def schedule_restart(session: AsyncSession) -> None:
    """Restarts the kernel in the background; the next execution waits for it."""
    # So that the result of a death comes at once.
    session._restarting = asyncio.get_running_loop().create_task(
        _telemetry.kernel_restart(session, session._backend.restart())
    )


async def await_pending_restart(session: AsyncSession) -> None:
    """Waits for a restart under way; a ``KernelStartError`` it ended with surfaces here."""
    task, session._restarting = session._restarting, None
    if task is not None:
        await task
        session._kernel_up = True


def prepare_work_dir(work_dir: str | Path | None, within: Path | None = None) -> Path:
    """The work dir, made if absent; None makes a temp dir (kept after close), in ``within``.

    Raises:
        ConfigurationError: it exists and is no directory, or cannot be made.
    """
    if work_dir is None:
        return Path(tempfile.mkdtemp(prefix="kernelexec-", dir=within)).resolve()
    path = Path(work_dir).expanduser().resolve()
    try:
        path.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError) as exc:
        raise ConfigurationError(f"work_dir {path} exists and is not a directory") from exc
    except OSError as exc:
        raise ConfigurationError(f"cannot create work_dir {path}: {exc}") from exc
    return path


def warn(message: str) -> None:
    """Warns at the caller's line: the first frame outside kernelexec (``Session`` wraps us)."""
    level, frame = 2, sys._getframe(1)
    while frame.f_back is not None and frame.f_code.co_filename.startswith(_PACKAGE):
        frame, level = frame.f_back, level + 1
    warnings.warn(message, UserWarning, stacklevel=level)
