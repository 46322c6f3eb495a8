"""Checkpoints: a kernel's variables, imports and files in a directory a person can read.

A checkpoint is made in three steps. The kernel pickles its namespace variable
by variable (``_kernel/checkpoint.py``, sent as code, run silently) into a
staging folder of its work dir, the one folder both sides see, local or in a
container. This process then moves those files into the checkpoint (renames:
the data never passes through it), copies the work dir's files, and writes
``manifest.json`` last: a directory without one is not a checkpoint.
(``_manifest.py`` describes the directory; ``_kernel_calls.py`` runs the
kernel's side.)

The work dir's files are copied, not referenced: a checkpoint outlives its
work dir (pause overnight, clean up, restore elsewhere) and the kernel keeps
changing the files after it is made. Links in the work dir are never followed
(``_workdir``), earlier checkpoints under ``checkpoints/`` are left out.

Restoring (``_restore``) reverses it: the files go into the new work dir, the
variable files into a staging folder there, and the kernel loads them, first
refusing a checkpoint made by another Python (major.minor) or with other
versions of the packages whose objects it holds.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import secrets
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import _workdir
from .._backends import KernelBackend
from .._exceptions import CheckpointError, DiskSpaceError
from . import _disk
from ._kernel_calls import kernel_call, run_silently
from ._manifest import (
    DEFAULT_FOLDER,
    MANIFEST,
    Checkpoint,
    build_manifest,
    check_report,
    dump_json,
    read_json,
)

__all__ = ["take"]


async def take(
    backend: KernelBackend,
    *,
    work_dir: Path,
    kernel_dir: str,
    path: str | Path | None,
    notebook: Path,
    cells: int,
    files: bool,
    timeout: float,
    variable_timeout: float,
    max_bytes: int | None = None,
) -> Checkpoint:
    """Checkpoints the kernel's namespace (and, with ``files``, the work dir) into ``path``.

    What it writes is held to a budget before it is written: the work dir's
    files by their apparent sizes (a sparse file at its full length), the
    variables by a cap the kernel is told and this side checks again. The
    budget is ``max_bytes`` and the room on the disks it writes to (minus a
    reserve, ``_disk.reserve``). On any failure what was written is removed.

    Args:
        backend: the running kernel.
        work_dir: the session's work dir, where the staging folder is made.
        kernel_dir: the work dir as the kernel sees it ("/workspace" in Docker).
        path: the checkpoint directory (absent or empty); None: a new one
            under ``work_dir/checkpoints/``.
        notebook: the session's transcript, copied into the checkpoint.
        cells: code cells the transcript holds (a restored session numbers on).
        files: copy the work dir's files.
        timeout: seconds for the whole of it; the kernel is interrupted after.
        variable_timeout: seconds per variable in the kernel.
        max_bytes: what the checkpoint may hold, at most (None: what the disk has).

    Raises:
        DiskSpaceError: it would not fit in ``max_bytes`` or on the disk (a
            variable that would pass the budget included); nothing is kept.
        CheckpointError: the kernel could not make it (no cloudpickle there,
            it died or took too long: ``transient`` says which may pass), or
            ``path`` cannot be used.
    """
    started = time.monotonic()
    target = _Target.make(work_dir, path)
    staging = f".kernelexec-checkpoint-{secrets.token_hex(8)}"
    try:
        wanted = (
            await asyncio.to_thread(_files_to_copy, work_dir, target, staging, notebook)
            if files
            else _Files()
        )
        _disk.check(
            wanted.size,
            target.path,
            work_dir,
            budget=max_bytes,
            what=f"the checkpoint's copy of {_disk.files(len(wanted.copies))} of the work dir",
            setting="max_bytes",
        )
        room = _disk.room(target.path, work_dir) - wanted.size
        budget = room if max_bytes is None else min(room, max_bytes - wanted.size)
        options = {"variable_timeout": variable_timeout, "max_bytes": budget}
        await run_silently(
            backend,
            kernel_call("dump", f"{kernel_dir}/{staging}", options),
            timeout=timeout,
            what="the checkpoint",
        )
        report, held = await asyncio.to_thread(_collect, work_dir, staging, target, budget)
        _refuse_disk_skips(report, budget)
        copied = await asyncio.to_thread(_copy_work_dir, work_dir, target, wanted)
        manifest = build_manifest(report, work_dir, notebook, cells, copied, wanted.left_out)
        manifest["bytes"] = held + wanted.size
        manifest["seconds"] = round(time.monotonic() - started, 3)
        await asyncio.to_thread(target.write, MANIFEST, dump_json(manifest))
    except BaseException as exc:
        await asyncio.to_thread(target.discard)
        if _disk.is_full(exc):
            assert isinstance(exc, OSError)
            raise _disk.full(exc, "the checkpoint") from None
        if isinstance(exc, OSError) and not isinstance(exc, _workdir.Refused):
            raise CheckpointError(f"the checkpoint failed: {exc}", transient=True) from exc
        raise
    finally:
        await asyncio.to_thread(_workdir.remove_tree, work_dir / staging)
    return Checkpoint._of(target.path, manifest)


def _refuse_disk_skips(report: dict[str, Any], budget: int) -> None:
    """A variable the kernel left out for want of room fails the checkpoint: it would not fit."""
    for skipped in report["skipped"]:
        if skipped.get("cause") == "disk":
            raise DiskSpaceError(
                f"variable {skipped['name']!r} ({skipped['type']}) did not fit in the "
                f"checkpoint, whose variables had {_disk.shown(max(budget, 0))} (the room on "
                f"disk, or max_bytes): {skipped['reason']}; nothing was kept. Delete large "
                "variables you do not need, free some disk space, or raise the budget"
            )


class _Target:
    """The checkpoint directory: walked from the work dir, no link followed, when inside it."""

    def __init__(self, root: Path, prefix: list[str], path: Path) -> None:
        self.root, self.prefix, self.path = root, prefix, path
        self.made = False  # the folder itself is ours to remove if the checkpoint fails

    @classmethod
    def make(cls, work_dir: Path, path: str | Path | None) -> _Target:
        if path is None:
            stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
            path = work_dir / DEFAULT_FOLDER / f"{stamp}-{secrets.token_hex(3)}"
        target = Path(path).expanduser().absolute()
        existed = os.path.lexists(target)
        relative = os.path.normpath(os.path.relpath(target, work_dir))
        if relative == "." or relative.startswith(".."):
            if relative == ".":
                raise CheckpointError("a checkpoint cannot be the work dir itself; give a path")
            # Outside the work dir: the caller's choice, made as asked.
            try:
                target.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise CheckpointError(f"cannot make the checkpoint dir {target}: {exc}") from exc
            self = cls(target, [], target)
        else:
            # Inside: the kernel may have planted links on the way; they are moved aside.
            self = cls(work_dir, relative.split("/"), target)
        fd = self.folder([])
        try:
            if os.listdir(fd):
                raise CheckpointError(
                    f"{target} is not empty; give a new or empty directory for the checkpoint"
                )
        finally:
            os.close(fd)
        self.made = not existed
        return self

    def folder(self, parts: list[str]) -> int:
        try:
            fd, _ = _workdir.own_folder(self.root, [*self.prefix, *parts, "-"])
        except OSError as exc:
            raise CheckpointError(f"cannot write the checkpoint in {self.path}: {exc}") from exc
        return fd

    def write(self, name: str, data: bytes) -> None:
        _workdir.write(self.root, "/".join([*self.prefix, name]), data)

    def discard(self) -> None:
        """Removes what a checkpoint writes here (never anything else), and the folder
        itself if the checkpoint made it."""
        try:
            fd = _workdir.open_folder(self.root, self.prefix)
        except OSError:
            return
        try:
            for name in ("vars", "files"):
                _workdir.remove_in(fd, name)
            for name in (MANIFEST, "transcript.ipynb"):
                with contextlib.suppress(OSError):
                    os.unlink(name, dir_fd=fd)
        finally:
            os.close(fd)
        if self.made:
            with contextlib.suppress(OSError):
                self.path.rmdir()


def _collect(
    work_dir: Path, staging: str, target: _Target, budget: int
) -> tuple[dict[str, Any], int]:
    """Reads the kernel's report and moves its variable files into the checkpoint.

    Returns:
        The report, and the bytes the variable files hold.

    Raises:
        DiskSpaceError: the files hold more than ``budget`` (a kernel that
            ignored the cap it was given).
    """
    try:
        folder = _workdir.open_folder(work_dir, [staging])
    except OSError as exc:
        raise CheckpointError(
            f"the kernel's checkpoint files are not in {work_dir / staging} ({exc}); "
            "checkpoints need the kernel to share the session's work dir"
        ) from exc
    held = 0
    try:
        report = read_json(folder, "report.json", "the kernel's report")
        check_report(report)
        into = target.folder(["vars"])
        try:
            for entry in report["variables"]:
                size = 0
                for suffix in (".pkl", ".buf"):
                    size += _move(folder, into, entry["file"] + suffix, budget - held - size)
                if size != entry["size"]:
                    raise CheckpointError(
                        f"the files of variable {entry['name']!r} changed while they were moved"
                    )
                held += size
        finally:
            os.close(into)
    finally:
        os.close(folder)
    return report, held


def _move(source: int, target: int, name: str, most: int) -> int:
    """Moves the regular file ``name`` between two folders; its size. Links are refused.

    Renamed first, then opened where it landed: what is checked is what was
    moved, whatever the kernel swaps in meanwhile. A file over ``most`` bytes
    fails the checkpoint (whose folder the caller removes).
    """
    try:
        os.rename(name, name, src_dir_fd=source, dst_dir_fd=target)
        moved = target
    except OSError as exc:
        if exc.errno != errno.EXDEV:
            raise CheckpointError(f"could not move {name} into the checkpoint: {exc}") from exc
        moved = source  # another file system: copied below
    try:
        with _workdir.open_in(moved, name) as file:
            info = os.fstat(file.fileno())
            if info.st_nlink != 1:
                raise CheckpointError(f"{name} has other names (hard links); not carried")
            if info.st_size > most:
                raise DiskSpaceError(
                    f"the kernel wrote {info.st_size:,} bytes to {name}, over the "
                    f"{max(most, 0):,} left in the checkpoint's budget; nothing was kept"
                )
            if moved is source:
                flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
                fd = os.open(name, flags, 0o600, dir_fd=target)
                try:
                    _workdir.copy_data(file.fileno(), fd, info.st_size)
                finally:
                    os.close(fd)
            return info.st_size
    except _workdir.Refused as exc:
        with contextlib.suppress(OSError):
            os.unlink(name, dir_fd=target)
        raise CheckpointError(f"{name} in the kernel's checkpoint files: {exc}") from exc


@dataclass
class _Files:
    """The work-dir files a checkpoint will copy, and their apparent size together."""

    copies: list[tuple[str, str]] = field(default_factory=list)  # (in the work dir, in it)
    size: int = 0
    left_out: list[str] = field(default_factory=list)


def _files_to_copy(work_dir: Path, target: _Target, staging: str, notebook: Path) -> _Files:
    """What ``files=True`` copies: the work dir's regular files but ours, and the transcript."""
    listing = _workdir.list_tree(work_dir, max_files=100_000)
    wanted = _Files(left_out=list(listing.skipped))
    if listing.truncated:
        wanted.left_out.append("files past the first 100,000")
    notebook_rel = os.path.relpath(notebook, work_dir)
    previous = os.path.join(os.path.dirname(notebook_rel), _workdir.previous_of(notebook.name))
    own = "/".join(target.prefix) + "/" if target.root == work_dir else None
    for entry in listing.files:
        first = entry.path.split("/", 1)[0]
        if first in (staging, DEFAULT_FOLDER) or (own and entry.path.startswith(own)):
            continue  # ours: staging, this and earlier checkpoints
        if entry.path == previous:
            continue  # the transcript's previous version: the transcript is copied
        name = "transcript.ipynb" if entry.path == notebook_rel else f"files/{entry.path}"
        wanted.copies.append((entry.path, name))
        wanted.size += entry.size
    if DEFAULT_FOLDER in {e.path.split("/", 1)[0] for e in listing.files}:
        wanted.left_out.append(f"{DEFAULT_FOLDER}/: checkpoints are not copied into checkpoints")
    return wanted


def _copy_work_dir(work_dir: Path, target: _Target, wanted: _Files) -> int:
    """Copies the files ``wanted`` lists into the checkpoint; how many (the transcript aside).

    Together they may take what they measured when listed: a file that grew
    meanwhile past what is left is refused (``DiskSpaceError``). One gone or
    unreadable meanwhile is left out, and said so.

    Raises:
        DiskSpaceError: the files grew past their budget.
        OSError: the disk is full, or the transcript cannot be copied.
    """
    copied, left = 0, wanted.size
    for relative, name in wanted.copies:
        try:
            left -= _workdir.copy(
                work_dir, relative, target.root, "/".join([*target.prefix, name]), max_bytes=left
            )
        except DiskSpaceError:
            raise
        except OSError as exc:
            if _disk.is_full(exc) or name == "transcript.ipynb":
                raise
            wanted.left_out.append(f"{relative}: {exc}")
            continue
        copied += name != "transcript.ipynb"
    return copied
