"""kernelexec's own files in a work dir: made under a temp name, renamed into place; copies.

What a rename cannot replace (a folder at the file's name, a link or a file at
a folder on the way) is moved aside, ``<name>.moved-<hex>``, and the note
returned says so. Copies keep holes and are bounded by the length a file had
when opened.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import secrets
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

from .._exceptions import DiskSpaceError
from ._open import ATTEMPTS, CLOEXEC, Refused, enter, kind_of, open_folder, open_read, parts_of

__all__ = [
    "copy",
    "copy_data",
    "copy_range",
    "create",
    "exchange",
    "own_folder",
    "previous_of",
    "put_in_place",
    "temp_file",
    "write",
    "write_all",
]

_NEW = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | CLOEXEC


def temp_file(folder: int) -> tuple[str, int]:
    """A new, empty file under a random name in ``folder``: (name, handle)."""
    for _ in range(ATTEMPTS):
        name = f".kernelexec-{secrets.token_hex(8)}.tmp"
        try:
            return name, os.open(name, _NEW, 0o666, dir_fd=folder)
        except FileExistsError:
            continue  # planted under that very name: take another
    raise Refused("busy", "could not make a temp file in the work dir; try again")


def put_in_place(folder: int, temp: str, name: str, shown: str) -> str | None:
    """Renames ``temp`` to ``name`` in ``folder``, replacing a file or link there.

    A folder holding the name is moved aside first.

    Returns:
        A note when something had to be moved aside, else None.

    Raises:
        OSError: the rename failed for another reason (``temp`` is removed).
    """
    note = None
    try:
        for _ in range(ATTEMPTS):
            try:
                os.rename(temp, name, src_dir_fd=folder, dst_dir_fd=folder)
                return note
            except OSError as exc:
                if exc.errno not in (errno.EISDIR, errno.ENOTEMPTY, errno.EEXIST):
                    raise
                note = _move_aside(folder, name, shown) or note
        raise Refused("busy", f"{shown!r} kept changing while kernelexec wrote it; try again")
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temp, dir_fd=folder)
        raise


def previous_of(name: str) -> str:
    """The hidden name beside ``name`` where kernelexec keeps that file's previous version.

    The transcript's (``_session/_transcript.py``): not a file of the session's,
    so a fork's or a checkpoint's copy of the work dir leaves it out.
    """
    return f".{name}.previous"


_RENAME_EXCHANGE = 2  # linux/fs.h
_libc: ctypes.CDLL | None = None


def exchange(folder: int, one: str, other: str) -> bool:
    """Swaps what the names ``one`` and ``other`` in ``folder`` hold, in one step.

    ``renameat2(RENAME_EXCHANGE)``: a reader of either name sees the one file
    or the other, never neither; no link is followed, no file is written, and
    unlike a rename over a file, ext4 does not start the displaced file's
    writeback first (``auto_da_alloc``), which costs in proportion to its size.

    Returns:
        False, with nothing moved, where it cannot be done: no such call (not
        Linux, or a C library without it), a file system that cannot swap, or
        either name missing.

    Raises:
        OSError: it failed for another reason.
    """
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
    call = getattr(_libc, "renameat2", None)
    if call is None:
        return False
    if call(folder, os.fsencode(one), folder, os.fsencode(other), _RENAME_EXCHANGE) == 0:
        return True
    code = ctypes.get_errno()
    if code in (errno.ENOENT, errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP, errno.EXDEV):
        return False
    raise OSError(code, os.strerror(code), other)


def _move_aside(folder: int, name: str, shown: str) -> str | None:
    """Renames what holds ``name`` in ``folder`` out of the way; a note saying so."""
    kind = kind_of(folder, name) or "something"
    aside = f"{name}.moved-{secrets.token_hex(3)}"
    try:
        os.rename(name, aside, src_dir_fd=folder, dst_dir_fd=folder)
    except FileNotFoundError:
        return None  # gone meanwhile
    where = shown.rpartition("/")[0]
    return (
        f"The session's code had put a {kind} at {shown}, where kernelexec writes; "
        f"it was moved to {f'{where}/' if where else ''}{aside}."
    )


def own_folder(root: Path, parts: list[str]) -> tuple[int, list[str]]:
    """A handle on the folder of kernelexec's own file ``parts``, made if need be.

    Returns:
        The handle, and notes on what had to be moved aside on the way.
    """
    notes: list[str] = []
    fd = open_folder(root, [])
    try:
        for depth, name in enumerate(parts[:-1]):
            shown = "/".join(parts[: depth + 1])
            for _ in range(ATTEMPTS):
                try:
                    child = enter(fd, name, shown, create=True)
                    break
                except Refused as exc:
                    if exc.reason not in ("link", "not_a_folder", "denied"):
                        raise
                    note = _move_aside(fd, name, shown)
                    notes.extend([note] if note else [])
            else:
                raise Refused("busy", f"{shown!r} kept changing while kernelexec made it")
            os.close(fd)
            fd = child
    except BaseException:
        os.close(fd)
        raise
    return fd, notes


def write(root: Path, relative: str, data: bytes) -> str | None:
    """Writes one of kernelexec's own files whole: a reader sees all of it or none.

    Returns:
        A note when something the session made had to be moved aside, else None.

    Raises:
        OSError: the work dir cannot take it (gone, full, or not writable).
    """
    return _write_whole(root, relative, lambda fd: write_all(fd, data))


def _write_whole(root: Path, relative: str, fill: Callable[[int], object]) -> str | None:
    """Makes one of kernelexec's own files under a temp name, ``fill``s it, puts it in place."""
    parts = parts_of(relative)
    folder, notes = own_folder(root, parts)
    try:
        temp, fd = temp_file(folder)
        try:
            fill(fd)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(temp, dir_fd=folder)
            raise
        finally:
            os.close(fd)
        notes.append(put_in_place(folder, temp, parts[-1], "/".join(parts)) or "")
    finally:
        os.close(folder)
    return " ".join(n for n in notes if n) or None


def create(root: Path, relative: str) -> tuple[BinaryIO, str | None]:
    """One of kernelexec's own files, in place at once and open for writing.

    For a file written as things happen (a spill): it is ours from the start,
    so nothing the kernel does to the name later redirects the writes.

    Returns:
        The open file, and a note as for ``write``.

    Raises:
        OSError: the work dir cannot take it.
    """
    parts = parts_of(relative)
    folder, notes = own_folder(root, parts)
    try:
        temp, fd = temp_file(folder)
        try:
            notes.append(put_in_place(folder, temp, parts[-1], "/".join(parts)) or "")
        except BaseException:
            os.close(fd)
            raise
    finally:
        os.close(folder)
    return os.fdopen(fd, "wb"), " ".join(n for n in notes if n) or None


def copy(
    source_root: Path,
    relative: str,
    target_root: Path,
    target: str | None = None,
    *,
    max_bytes: int | None = None,
) -> int:
    """Copies one file between trees, never through a link on either side; holes stay holes.

    The copy holds the file as it was when opened, up to its length then
    (a file that grows meanwhile is copied to that length): what it writes
    is bounded before it starts. It is written under a temp name and renamed
    into place, so a failed copy leaves nothing at the name.

    Args:
        max_bytes: refuse a file longer than this (its apparent length).

    Returns:
        The length copied (a sparse file's holes count, though they are not written).

    Raises:
        DiskSpaceError: the file is longer than ``max_bytes``; nothing was written.
        OSError: it cannot be read, or the target tree cannot take it.
    """
    with open_read(source_root, relative) as source:
        size = os.fstat(source.fileno()).st_size
        if max_bytes is not None and size > max_bytes:
            raise DiskSpaceError(
                f"{relative!r} is {size:,} bytes long, more than the {max_bytes:,} left in "
                "the budget; nothing was written"
            )
        _write_whole(
            target_root, target or relative, lambda fd: copy_data(source.fileno(), fd, size)
        )
    return size


def copy_data(source: int, target: int, size: int) -> int:
    """Copies the first ``size`` bytes of one open file into another, holes kept as holes.

    Returns:
        The bytes of data written (fewer than ``size`` for a sparse or shrunk file).
    """
    written = offset = 0
    seek_data = getattr(os, "SEEK_DATA", None)
    while offset < size:
        start, end = offset, size
        if seek_data is not None:
            try:
                start = os.lseek(source, offset, seek_data)
                end = min(os.lseek(source, start, os.SEEK_HOLE), size)
            except OSError as exc:
                if exc.errno == errno.ENXIO:
                    break  # only a hole is left
                start, end = offset, size  # holes unknown here: copy it all
        if start >= size:
            break
        written += copy_range(source, target, start, end)
        offset = end
    os.ftruncate(target, size)  # a hole at the end, and a file that shrank meanwhile
    return written


def copy_range(source: int, target: int, start: int, end: int) -> int:
    """Copies bytes ``start`` to ``end`` at the same offsets; how many (fewer at end of file).

    Inside the OS (``copy_file_range``) where it can, else through this process.
    """
    done = 0
    copy_range = getattr(os, "copy_file_range", None)
    while start + done < end:
        at, want = start + done, min(end - start - done, 1 << 30)
        try:
            if copy_range is None:
                raise OSError(errno.ENOSYS, "no copy_file_range")
            n = copy_range(source, target, want, at, at)
        except OSError as exc:
            if exc.errno not in (errno.ENOSYS, errno.EXDEV, errno.EINVAL, errno.EOPNOTSUPP):
                raise
            chunk = os.pread(source, min(want, 1 << 20), at)
            n = len(chunk)
            view = memoryview(chunk)
            while view:
                view = view[os.pwrite(target, view, at + n - len(view)) :]
        if n == 0:
            break  # the file shrank
        done += n
    return done


def write_all(fd: int, data: bytes, offset: int | None = None) -> None:
    """Writes all of ``data`` to ``fd`` (os.write may take part of it), at ``offset`` if given."""
    rest = memoryview(data)
    while rest:
        if offset is None:
            rest = rest[os.write(fd, rest) :]
        else:
            done = os.pwrite(fd, rest, offset)
            rest, offset = rest[done:], offset + done
