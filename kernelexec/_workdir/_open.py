"""A path in a work dir walked one name at a time, and what is there opened, no link followed.

See the package's docstring for why. A name that cannot be walked is
``Refused``, with a ``reason`` a caller can map (to an HTTP status, say).
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections.abc import Sequence
from pathlib import Path
from typing import BinaryIO, Literal

__all__ = [
    "ATTEMPTS",
    "CLOEXEC",
    "FOLDER_FLAGS",
    "Refused",
    "enter",
    "kind_of",
    "link_message",
    "locate",
    "open_folder",
    "open_in",
    "open_read",
    "parts_of",
    "read_kept",
]

Reason = Literal[
    "invalid", "too_long", "link", "missing", "not_a_file", "not_a_folder", "denied", "busy"
]

MAX_PATH = 4096  # bytes in a path, as PATH_MAX on Linux
MAX_NAME = 255  # bytes in one name, as NAME_MAX
ATTEMPTS = 5  # a racing kernel may undo each repair; then we give up

CLOEXEC = getattr(os, "O_CLOEXEC", 0)
FOLDER_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | CLOEXEC
# O_NONBLOCK: a FIFO planted where we read must not block the open.
_READ = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | CLOEXEC
_NOT_A_FOLDER = (errno.ENOTDIR, errno.ELOOP)  # O_DIRECTORY|O_NOFOLLOW on a link: ENOTDIR on Linux
_LINK_ERRNOS = (errno.ELOOP, getattr(errno, "EMLINK", errno.ELOOP))  # O_NOFOLLOW on a link


class Refused(OSError):
    """A path in a work dir that kernelexec will not open; the message says why.

    Attributes:
        reason: what was met, for callers that map it (to an HTTP status, say).
    """

    def __init__(self, reason: Reason, message: str) -> None:
        super().__init__(message)
        self.reason: Reason = reason

    def __str__(self) -> str:
        return str(self.args[0])

    def __reduce__(self) -> tuple[type[Refused], tuple[Reason, str]]:
        # Whole across processes (a Ray node's host raises it for its caller).
        return Refused, (self.reason, str(self))


def parts_of(relative: str | Sequence[str]) -> list[str]:
    """The names along a path relative to a work dir.

    Raises:
        Refused: the path is empty, absolute, climbs out with ``..``, holds a
            NUL or cannot be a file name, or is longer than the OS allows.
    """
    text = relative if isinstance(relative, str) else "/".join(relative)
    shown = repr(text[:200])
    if "\0" in text:
        raise Refused("invalid", f"the path holds a NUL character: {shown}")
    if text.startswith("/"):
        raise Refused("invalid", f"the path is absolute; give it relative to the work dir: {shown}")
    parts = [p for p in text.split("/") if p not in ("", ".")]
    if ".." in parts:
        raise Refused("invalid", f"the path holds a '..' segment: {shown}")
    if not parts:
        raise Refused("invalid", "the path is empty")
    try:
        size = len(os.fsencode(text))
        longest = max(len(os.fsencode(p)) for p in parts)
    except UnicodeEncodeError:
        raise Refused("invalid", f"the path is not valid text: {shown}") from None
    if size > MAX_PATH:
        raise Refused("too_long", f"the path is {size:,} bytes, over the limit of {MAX_PATH:,}")
    if longest > MAX_NAME:
        raise Refused(
            "too_long", f"a name in the path is {longest:,} bytes, over the limit of {MAX_NAME}"
        )
    return parts


def locate(path: Path, work_dir: Path) -> tuple[Path, list[str]]:
    """The folder to walk from and the names under it, for a file kernelexec keeps.

    A file inside ``work_dir`` is walked from ``work_dir``; one elsewhere (a
    transcript the caller put outside on purpose) from its own folder.
    """
    relative = os.path.normpath(os.path.relpath(path, work_dir))
    if relative == ".." or relative.startswith(("../", "/")):
        return path.parent, [path.name]
    return work_dir, relative.split("/")


def open_folder(root: Path, parts: Sequence[str], *, create: bool = False) -> int:
    """A handle on the folder ``parts`` names under ``root``, no link followed.

    The caller closes it. ``root`` itself is opened by its path, its last
    name without following a link: a work dir replaced by a link is refused.

    Args:
        root: the work dir.
        parts: the names of the folders below it, in order.
        create: make the folders that are missing.

    Raises:
        Refused: a name on the way is a link or a file, or missing (and
            not ``create``), or the OS refused.
    """
    try:
        fd = os.open(root, FOLDER_FLAGS)
    except OSError as exc:
        raise _refusal(exc, str(root)) from None
    try:
        for depth, name in enumerate(parts):
            shown = "/".join(parts[: depth + 1])
            child = enter(fd, name, shown, create=create)
            os.close(fd)
            fd = child
    except BaseException:
        os.close(fd)
        raise
    return fd


def enter(fd: int, name: str, shown: str, *, create: bool) -> int:
    for _ in range(ATTEMPTS):
        try:
            return os.open(name, FOLDER_FLAGS, dir_fd=fd)
        except FileNotFoundError:
            if not create:
                raise Refused("missing", f"there is no folder {shown!r}") from None
            with contextlib.suppress(FileExistsError):  # made meanwhile: open it next round
                os.mkdir(name, 0o777, dir_fd=fd)
        except OSError as exc:
            if exc.errno not in _NOT_A_FOLDER:
                raise _refusal(exc, shown) from None
            kind = kind_of(fd, name)
            if kind == "link":
                raise Refused("link", link_message(shown)) from None
            if kind in ("file", "special file"):
                raise Refused("not_a_folder", f"{shown!r} is a {kind}, not a folder") from None
            # Gone, or a folder again: it changed since the open; try again.
    raise Refused("busy", f"{shown!r} kept changing while kernelexec opened it; try again")


def kind_of(fd: int, name: str) -> str | None:
    """What ``name`` is in the folder ``fd`` (for messages only), None if gone."""
    try:
        mode = os.stat(name, dir_fd=fd, follow_symlinks=False).st_mode
    except OSError:
        return None
    if stat.S_ISLNK(mode):
        return "link"
    if stat.S_ISDIR(mode):
        return "folder"
    return "file" if stat.S_ISREG(mode) else "special file"


def link_message(shown: str) -> str:
    return (
        f"{shown!r} is a symlink; kernelexec never follows links in a work dir "
        "(they could lead outside it)"
    )


def _refusal(exc: OSError, shown: str) -> OSError:
    """A Refused for an error the path explains; other errors as they are."""
    reasons: dict[int, Reason] = {
        errno.ENAMETOOLONG: "too_long",
        errno.EACCES: "denied",
        errno.EPERM: "denied",
        errno.ENOENT: "missing",
        errno.ENOTDIR: "not_a_folder",
        errno.ELOOP: "link",
    }
    reason = reasons.get(exc.errno or 0)
    if reason is None:
        return exc
    if reason == "link":
        return Refused(reason, link_message(shown))
    return Refused(reason, f"{shown!r}: {exc.strerror}")


def open_read(root: Path, relative: str | Sequence[str]) -> BinaryIO:
    """A regular file under ``root``, opened for reading with no link followed.

    Raises:
        Refused: the path is bad, leads through or to a link, is missing, or
            is a folder, a pipe or a socket rather than a regular file.
    """
    parts = parts_of(relative)
    folder = open_folder(root, parts[:-1])
    try:
        return open_in(folder, parts[-1], "/".join(parts))
    finally:
        os.close(folder)


def open_in(folder: int, name: str, shown: str | None = None) -> BinaryIO:
    """The regular file ``name`` in the folder ``folder``, for reading, no link followed.

    Raises:
        Refused: as for ``open_read``.
    """
    shown = shown or name
    try:
        fd = os.open(name, _READ, dir_fd=folder)
    except OSError as exc:
        if exc.errno in _LINK_ERRNOS:
            raise Refused("link", link_message(shown)) from None
        if exc.errno == errno.ENXIO:  # a socket
            raise Refused("not_a_file", f"{shown!r} is not a regular file") from None
        if exc.errno == errno.ENOENT:
            raise Refused("missing", f"there is no file {shown!r}") from None
        raise _refusal(exc, shown) from None
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        what = "a folder" if stat.S_ISDIR(mode) else "not a regular file (a pipe?)"
        raise Refused("not_a_file", f"{shown!r} is {what}")
    os.set_blocking(fd, True)
    return os.fdopen(fd, "rb")


def read_kept(path: Path, work_dir: Path) -> bytes | None:
    """One of kernelexec's own files (the transcript) read whole; None if it is not there.

    Raises:
        Refused: something other than a regular file holds its name.
    """
    root, parts = locate(path, work_dir)
    try:
        with open_read(root, parts) as file:
            return file.read()
    except Refused as exc:
        if exc.reason == "missing":
            return None
        raise
