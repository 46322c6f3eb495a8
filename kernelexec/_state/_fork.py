"""``AsyncSession.fork``: a new session holding a copy of a live session's state.

A local kernel is forked as a process (copy-on-write: every variable, import,
class and figure, with nothing re-run), unless something in it would not
survive ``fork()``: a GPU driver in use, or a live GNU OpenMP pool, which
would leave the copy broken or hung on its first parallel operation. Such a
kernel, and one that cannot be forked here (a gateway's, a container's), is
checkpointed and restored into a new kernel of the same kind instead, and the
report says why. Either way the new session gets its own work dir holding a
copy of the parent's files, and a transcript that begins with a note naming
the parent, then the parent's cells.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from .. import _workdir
from .._backends import LocalBackend
from .._exceptions import ConfigurationError, DiskSpaceError, KernelStartError, SessionBusyError
from .._session._transcript import note_cell
from . import _disk

if TYPE_CHECKING:
    from .._session._async import AsyncSession

__all__ = ["FORK_METHODS", "ForkMethod", "ForkReport", "fork_session"]

ForkMethod = Literal["auto", "process", "checkpoint"]
FORK_METHODS: tuple[ForkMethod, ...] = ("auto", "process", "checkpoint")
_CHECKPOINTS = "checkpoints"  # the parent's checkpoints stay the parent's


@dataclass(frozen=True)
class ForkReport:
    """How a session was forked, as ``session.fork_report``.

    Attributes:
        parent_work_dir: the parent session's work dir.
        parent_transcript: the parent's transcript file.
        parent_cells: how many code cells the parent had run when forked.
        method: ``"process"`` (the kernel process was forked) or
            ``"checkpoint"`` (checkpointed and restored).
        files: how many of the parent's files were copied.
        left_behind: what did not come across, as text: variables a
            checkpoint could not carry (``"name (type): why"``), or what a
            forked process leaves behind (threads, the parent's child
            processes, shared sockets, and with ``method="process"`` asked
            for, a GPU context or OpenMP pool that is broken in the copy).
        reason: why a checkpoint was made rather than a process fork
            (None for a process fork).
    """

    parent_work_dir: str
    parent_transcript: str
    parent_cells: int
    method: str
    files: int
    left_behind: tuple[str, ...] = ()
    reason: str | None = None

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["left_behind"] = list(self.left_behind)
        return data


async def fork_session(
    parent: AsyncSession,
    work_dir: str | Path | None,
    *,
    wait: bool,
    method: ForkMethod = "auto",
    max_bytes: int | None = None,
) -> AsyncSession:
    """The body of ``AsyncSession.fork``."""
    from .._session._async import AsyncSession, _prepare_work_dir

    if method not in FORK_METHODS:
        raise ConfigurationError(
            f"method={method!r}: use one of {', '.join(repr(m) for m in FORK_METHODS)}"
        )
    parent._check_open()
    if method == "process" and not isinstance(parent._backend, LocalBackend):
        raise ConfigurationError(
            f"a {type(parent._backend).__name__} kernel cannot be forked as a process; "
            "use method='auto' or 'checkpoint'"
        )
    if not wait and parent._lock.locked():
        raise SessionBusyError(
            "the session is running an execution; fork(wait=True) waits for it to end"
        )
    async with parent._lock:
        await parent._ensure_kernel()
        if not await parent._backend.is_alive():
            raise KernelStartError("the kernel has died; there is no state to fork")
        backend = parent._backend
        can_fork = isinstance(backend, LocalBackend) and backend.can_fork()
        if method == "process" and not can_fork:
            raise ConfigurationError(
                f"this {type(backend).__name__} kernel cannot be forked as a process "
                "(another kernelspec's, or no os.pidfd_open); use method='auto' or 'checkpoint'"
            )
        target = _prepare_work_dir(work_dir)
        if target.resolve() == parent.work_dir.resolve():
            raise ConfigurationError("a fork needs a work dir of its own, not its parent's")
        await parent._transcript.flush()
        files = await asyncio.to_thread(_copy_files, parent, target, max_bytes)
        options = parent._fork_options()
        child: AsyncSession | None = None
        left_behind: tuple[str, ...] = ()
        if method == "checkpoint":
            reason: str | None = "a checkpoint was asked for (method='checkpoint')"
        elif not can_fork:
            reason = f"a {type(backend).__name__} kernel cannot be forked as a process"
        else:
            assert isinstance(backend, LocalBackend)
            made = await backend.fork(cwd=target, env=parent._env, force=method == "process")
            if made.backend is not None:
                child = AsyncSession(target, backend=made.backend, **options)
                child._env = dict(parent._env)
                child._kernel_up = True
                left_behind, reason = tuple(h.text for h in made.hazards), None
            else:
                reason = "; ".join(h.text for h in made.hazards if h.blocks)
        if child is None:
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


async def _by_checkpoint(
    parent: AsyncSession, target: Path, options: dict[str, Any], max_bytes: int | None
) -> tuple[AsyncSession, tuple[str, ...]]:
    from .._session._async import AsyncSession

    fresh = getattr(parent._backend, "fresh", None)
    if fresh is None:
        raise KernelStartError(
            f"a {type(parent._backend).__name__} kernel can neither be forked nor made again"
        )
    folder = Path(tempfile.mkdtemp(prefix="kernelexec-fork-"))
    try:
        checkpoint = await parent._checkpoint_now(folder, False, 300.0, 30.0, max_bytes=max_bytes)
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
