"""Disk space as a budget: what a checkpoint, a fork's copy or a restore may write.

Each of them knows, before it writes, about how much it will write: the
apparent sizes of the files it copies (a sparse file counts at its full
length, whatever few blocks it holds), and for a checkpoint's variables a
budget the kernel is told and our side checks again. ``check`` refuses with
``DiskSpaceError`` when that is more than the caller's budget or more than
the disk has free, keeping back a reserve (``reserve``) so that what runs
beside it (the transcript, the kernel's own files) does not meet a full disk
because of us. A disk that fills up anyway while we write (another writer,
the kernel) is reported the same way (``full``), and the caller removes
what it wrote.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

from .._exceptions import DiskSpaceError

__all__ = ["check", "files", "free", "full", "is_full", "reserve", "room", "shown"]

_RESERVE = 64 * 1024 * 1024  # bytes kept free on a big disk ...
_RESERVE_SHARE = 20  # ... or a twentieth of a small one
_FULL = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)


def _existing(path: Path) -> Path:
    """``path``, or its nearest folder that exists (where a new dir will be made)."""
    path = Path(path).absolute()
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def free(path: Path) -> int:
    """Bytes this process may still write on the file system holding ``path``."""
    stats = os.statvfs(_existing(path))
    return stats.f_bavail * stats.f_frsize


def reserve(path: Path) -> int:
    """Bytes kept free on that file system: 64 MiB, or a twentieth of a smaller one."""
    stats = os.statvfs(_existing(path))
    return min(_RESERVE, stats.f_blocks * stats.f_frsize // _RESERVE_SHARE)


def room(*paths: Path) -> int:
    """Bytes that may be written on each of the file systems holding ``paths``, at most."""
    return max(0, min(free(p) - reserve(p) for p in paths))


def files(count: int) -> str:
    """ "1 file", "12 files": a count of files for a message."""
    return f"{count} file" if count == 1 else f"{count} files"


def check(needed: int, *paths: Path, budget: int | None, what: str, setting: str) -> None:
    """Refuses, before anything is written, what would not fit.

    Args:
        needed: bytes it would write (apparent sizes).
        paths: where it would write them (each file system must have room).
        budget: the caller's limit, or None for none.
        what: what would be written, for the message ("the fork's copy of 12 files").
        setting: the setting that sets ``budget``, for the message.

    Raises:
        DiskSpaceError: over the budget, or over the room the disk has.
    """
    if budget is not None and needed > budget:
        raise DiskSpaceError(
            f"{what} would hold {shown(needed)}, over its budget of {shown(budget)} "
            f"({setting}); nothing was written. Remove large files from the work dir "
            "(sparse files count at their full length), or raise the budget"
        )
    for path in paths:
        left = room(path)
        if needed > left:
            raise DiskSpaceError(
                f"{what} would hold {shown(needed)}, but the disk holding {path} has "
                f"{shown(left)} to spare ({shown(free(path))} free, {shown(reserve(path))} "
                "kept in reserve); nothing was written. Free some space there"
            )


def is_full(exc: BaseException) -> bool:
    """The error says the disk (or a quota, or a file size limit) is full."""
    return isinstance(exc, OSError) and exc.errno in _FULL


def full(exc: OSError, what: str) -> DiskSpaceError:
    """The ``DiskSpaceError`` for an ``OSError`` that ``is_full`` says is a full disk."""
    return DiskSpaceError(
        f"{what} failed: the disk is full ({exc.strerror or exc}); what was written "
        "was removed. Free some space, or lower what is kept (checkpoints, large files)"
    )


def shown(size: float) -> str:
    """A byte count for people: "512 bytes", "3.0 GiB"."""
    if size < 1024:
        return f"{size:,.0f} bytes"
    for unit in ("KiB", "MiB", "GiB", "TiB"):
        size /= 1024
        if size < 1024 or unit == "TiB":
            break
    return f"{size:,.1f} {unit}"
