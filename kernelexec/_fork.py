"""``AsyncSession.fork``: a new session holding a copy of a live session's state.

A local kernel is forked as a process (copy-on-write: every variable, import,
class and figure, with nothing re-run); a kernel that cannot be forked here (a
gateway's, a container's) is checkpointed and restored into a new kernel of
the same kind instead, and the fork says so. Either way the new session gets
its own work dir holding a copy of the parent's files, and a transcript that
begins with a note naming the parent, then the parent's cells.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from . import _disk, _workdir
from ._backends import LocalBackend
from ._exceptions import (
    ConfigurationError,
    DiskSpaceError,
    KernelStartError,
    SessionBusyError,
)
from ._transcript import note_cell

if TYPE_CHECKING:
    from ._session import AsyncSession

__all__ = ["ForkReport", "fork_session"]

_CHECKPOINTS = "checkpoints"  # the parent's checkpoints stay the parent's


@dataclass(frozen=True)
class ForkReport:
    """How a session was forked, as ``session.fork_report``.

    Attributes:
        parent_work_dir: the parent session's work dir.
        parent_transcript: the parent's transcript file.
        parent_cells: how many code cells the parent had run when forked.
        method: ``"fork"`` (the kernel process was forked) or
            ``"checkpoint"`` (checkpointed and restored: a backend that
            cannot fork, such as a gateway or Docker).
        files: how many of the parent's files were copied.
        left_behind: variables a checkpoint could not carry (``"checkpoint"``
            only), as ``"name (type): why"``.
    """

    parent_work_dir: str
    parent_transcript: str
    parent_cells: int
    method: str
    files: int
    left_behind: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["left_behind"] = list(self.left_behind)
        return data


async def fork_session(
    parent: AsyncSession, work_dir: str | Path | None, *, wait: bool, max_bytes: int | None = None
) -> AsyncSession:
    """The body of ``AsyncSession.fork``."""
    from ._session import AsyncSession, _prepare_work_dir

    parent._check_open()
    if not wait and parent._lock.locked():
        raise SessionBusyError(
            "the session is running an execution; fork(wait=True) waits for it to end"
        )
    async with parent._lock:
        await parent._ensure_kernel()
        if not await parent._backend.is_alive():
            raise KernelStartError("the kernel has died; there is no state to fork")
        target = _prepare_work_dir(work_dir)
        if target.resolve() == parent.work_dir.resolve():
            raise ConfigurationError("a fork needs a work dir of its own, not its parent's")
        await parent._transcript.flush()
        files = await asyncio.to_thread(_copy_files, parent, target, max_bytes)
        options = parent._fork_options()
        backend = parent._backend
        left_behind: tuple[str, ...] = ()
        if isinstance(backend, LocalBackend) and backend.can_fork():
            forked = await backend.fork(cwd=target, env=parent._env)
            child = AsyncSession(target, backend=forked, **options)
            child._env = dict(parent._env)
            child._kernel_up = True
            method = "fork"
        else:
            child, left_behind = await _by_checkpoint(parent, target, options)
            method = "checkpoint"
        report = ForkReport(
            parent_work_dir=str(parent.work_dir),
            parent_transcript=str(parent.notebook_path),
            parent_cells=parent._seq,
            method=method,
            files=files,
            left_behind=left_behind,
        )
        child.fork_report = report
        _begin_transcript(child, parent, report)
        await child._transcript.flush()
        return child


async def _by_checkpoint(
    parent: AsyncSession, target: Path, options: dict[str, Any]
) -> tuple[AsyncSession, tuple[str, ...]]:
    from ._session import AsyncSession

    fresh = getattr(parent._backend, "fresh", None)
    if fresh is None:
        raise KernelStartError(
            f"a {type(parent._backend).__name__} kernel can neither be forked nor made again"
        )
    folder = Path(tempfile.mkdtemp(prefix="kernelexec-fork-"))
    try:
        checkpoint = await parent._checkpoint_now(folder, False, 300.0, 30.0)
        child = await AsyncSession.restore(checkpoint, target, backend=fresh(), **options)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    report = child.restore_report
    skipped = () if report is None else report.skipped
    return child, tuple(f"{s.name} ({s.type}): {s.reason}" for s in skipped)


def _copy_files(parent: AsyncSession, target: Path, max_bytes: int | None = None) -> int:
    """Copies the parent's files (never through a link) but its transcript and checkpoints.

    They are measured first, by apparent size, and refused whole when they
    would pass ``max_bytes`` or the room on the target's disk: nothing is
    copied then. Holes stay holes; a file that grew since it was measured is
    refused past what is left of the total.

    Raises:
        DiskSpaceError: the files would not fit (or the disk filled up: what
            was copied is removed).
    """
    listing = _workdir.list_tree(parent.work_dir, max_files=100_000)
    transcript = parent.notebook_path.resolve()
    wanted = [
        entry
        for entry in listing.files
        if entry.path.split("/", 1)[0] != _CHECKPOINTS
        and (parent.work_dir / entry.path).resolve() != transcript
    ]
    left = sum(entry.size for entry in wanted)
    _disk.check(
        left,
        target,
        budget=max_bytes,
        what=f"the fork's copy of {len(wanted)} files",
        setting="max_bytes",
    )
    copied: list[str] = []
    try:
        for entry in wanted:
            try:
                left -= _workdir.copy(parent.work_dir, entry.path, target, max_bytes=left)
            except OSError as exc:
                if _disk.is_full(exc):
                    raise _disk.full(exc, "the fork's copy of the files") from None
                continue  # gone or changed under us: the fork has what could be read
            copied.append(entry.path)
    except DiskSpaceError:
        for path in copied:  # the fork's new work dir: no kernel runs there yet
            with contextlib.suppress(OSError):
                (target / path).unlink()
        raise
    return len(copied)


def _begin_transcript(child: AsyncSession, parent: AsyncSession, report: ForkReport) -> None:
    how = (
        "forked (the kernel process, copy-on-write)"
        if report.method == "fork"
        else "checkpointed and restored (this backend cannot fork a process)"
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
    for cell in _cells_of(parent.notebook_path):
        child._transcript.add(cell)
    child._transcript.add(note_cell("**The fork's own cells** begin here."))
    child._seq = max(child._seq, parent._seq)


def _cells_of(path: Path) -> list[dict[str, Any]]:
    import nbformat  # here: it imports jsonschema, most of a second nobody else pays for

    try:
        notebook = nbformat.read(str(path), as_version=4)
    except (OSError, ValueError):
        return []
    return [dict(cell) for cell in notebook.cells]
