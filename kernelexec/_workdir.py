"""Files in a work dir, opened without ever following a link.

The kernel runs untrusted code and owns its work dir (a Docker kernel's is
bind-mounted from the host): any name there may be a symlink it planted to a
host path, and it can swap a folder for a link between a check and a use. So
nothing here checks a name and then opens it. A path is walked one name at a
time from a handle on the work dir: each folder is opened with
``O_DIRECTORY|O_NOFOLLOW`` relative to the folder before, the file itself with
``O_NOFOLLOW``, so every step happens inside a folder we hold and a link
anywhere fails the open instead of being followed. (``openat2`` with
``RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS`` does the walk in one call, but only on
Linux 5.6+ and through ctypes; our paths have one to three names, so the walk
costs a syscall or two per file, and it works on macOS as well.)

Files kernelexec writes (saved outputs, spills, the transcript) are made under
a random name with ``O_CREAT|O_EXCL|O_NOFOLLOW`` in the folder we hold, then
renamed into place relative to it. A rename replaces a link rather than writing
through it, so a link the kernel planted at such a name is gone and the file is
where the result says, and what the link pointed to is untouched. What a rename
cannot replace (a folder planted at the file's name, a link or a file planted
at ``outputs/``) is moved aside, renamed ``<name>.moved-<hex>`` beside it, and
the caller's note says so: kernelexec's output always lands under its own name,
and nothing the session made is deleted. A link met on the way to a file
someone asked to read or upload is refused instead: that file is not
kernelexec's to repair.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import stat
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO, Literal

from ._exceptions import DiskSpaceError

__all__ = [
    "Entry",
    "Listing",
    "Refused",
    "Upload",
    "copy",
    "copy_data",
    "create",
    "list_tree",
    "locate",
    "open_folder",
    "open_in",
    "open_read",
    "own_folder",
    "parts_of",
    "put_in_place",
    "read_kept",
    "remove_in",
    "remove_tree",
    "temp_file",
    "write",
    "write_all",
]

Reason = Literal[
    "invalid", "too_long", "link", "missing", "not_a_file", "not_a_folder", "denied", "busy"
]

MAX_PATH = 4096  # bytes in a path, as PATH_MAX on Linux
MAX_NAME = 255  # bytes in one name, as NAME_MAX
_ATTEMPTS = 5  # a racing kernel may undo each repair; then we give up

_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | _CLOEXEC
# O_NONBLOCK: a FIFO planted where we read must not block the open.
_READ = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | _CLOEXEC
_NEW = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | _CLOEXEC
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


# -- folders


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
        fd = os.open(root, _DIR)
    except OSError as exc:
        raise _refusal(exc, str(root)) from None
    try:
        for depth, name in enumerate(parts):
            shown = "/".join(parts[: depth + 1])
            child = _enter(fd, name, shown, create=create)
            os.close(fd)
            fd = child
    except BaseException:
        os.close(fd)
        raise
    return fd


def _enter(fd: int, name: str, shown: str, *, create: bool) -> int:
    for _ in range(_ATTEMPTS):
        try:
            return os.open(name, _DIR, dir_fd=fd)
        except FileNotFoundError:
            if not create:
                raise Refused("missing", f"there is no folder {shown!r}") from None
            with contextlib.suppress(FileExistsError):  # made meanwhile: open it next round
                os.mkdir(name, 0o777, dir_fd=fd)
        except OSError as exc:
            if exc.errno not in _NOT_A_FOLDER:
                raise _refusal(exc, shown) from None
            kind = _kind(fd, name)
            if kind == "link":
                raise Refused("link", _link_message(shown)) from None
            if kind in ("file", "special file"):
                raise Refused("not_a_folder", f"{shown!r} is a {kind}, not a folder") from None
            # Gone, or a folder again: it changed since the open; try again.
    raise Refused("busy", f"{shown!r} kept changing while kernelexec opened it; try again")


def _kind(fd: int, name: str) -> str | None:
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


def _link_message(shown: str) -> str:
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
        return Refused(reason, _link_message(shown))
    return Refused(reason, f"{shown!r}: {exc.strerror}")


# -- reading


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
            raise Refused("link", _link_message(shown)) from None
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


# -- kernelexec's own files


def temp_file(folder: int) -> tuple[str, int]:
    """A new, empty file under a random name in ``folder``: (name, handle)."""
    for _ in range(_ATTEMPTS):
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
        for _ in range(_ATTEMPTS):
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


def _move_aside(folder: int, name: str, shown: str) -> str | None:
    """Renames what holds ``name`` in ``folder`` out of the way; a note saying so."""
    kind = _kind(folder, name) or "something"
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
            for _ in range(_ATTEMPTS):
                try:
                    child = _enter(fd, name, shown, create=True)
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
        written += _copy_range(source, target, start, end)
        offset = end
    os.ftruncate(target, size)  # a hole at the end, and a file that shrank meanwhile
    return written


def _copy_range(source: int, target: int, start: int, end: int) -> int:
    """Copies bytes ``start`` to ``end`` at the same offsets; how many (fewer at end of file)."""
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


def write_all(fd: int, data: bytes) -> None:
    """Writes all of ``data`` to ``fd`` (os.write may take part of it)."""
    rest = memoryview(data)
    while rest:
        rest = rest[os.write(fd, rest) :]


class Upload:
    """A file someone sends into a work dir: whole at its name, or not at all.

    The bytes go to a temp file in the target's folder (held open from the
    start), which ``commit`` renames over the name; ``abort`` removes it.
    Unlike kernelexec's own files, a link on the way or at the name is
    refused: an upload does not repair the session's files.
    """

    def __init__(self, root: Path, relative: str | Sequence[str]) -> None:
        self.parts = parts_of(relative)
        self._folder = open_folder(root, self.parts[:-1], create=True)
        try:
            self._temp, self._fd = temp_file(self._folder)
        except BaseException:
            os.close(self._folder)
            raise

    def write(self, data: bytes) -> None:
        write_all(self._fd, data)

    def commit(self) -> os.stat_result:
        """Puts the file in place and returns its stat; the upload is then closed.

        Raises:
            Refused: the name is a folder or a link (the temp file is removed).
        """
        name, shown = self.parts[-1], "/".join(self.parts)
        try:
            kind = _kind(self._folder, name)  # for the refusal only: the rename never follows
            if kind == "folder":
                raise Refused("not_a_file", f"{shown!r} is a folder; name a file")
            if kind == "link":
                raise Refused("link", _link_message(shown))
            os.rename(self._temp, name, src_dir_fd=self._folder, dst_dir_fd=self._folder)
            return os.fstat(self._fd)
        except BaseException:
            self.abort()
            raise
        finally:
            self._close()

    def abort(self) -> None:
        """Removes the temp file, if it is still there."""
        with contextlib.suppress(OSError):
            os.unlink(self._temp, dir_fd=self._folder)
        self._close()

    def _close(self) -> None:
        for fd in (self._fd, self._folder):
            with contextlib.suppress(OSError):
                os.close(fd)
        self._fd = self._folder = -1


# -- listing


@dataclass(frozen=True)
class Entry:
    """A regular file found by ``list_tree``."""

    path: str
    size: int
    modified: float


@dataclass
class Listing:
    """What ``list_tree`` found, and what it left out.

    Attributes:
        files: regular files, folder by folder (sorted, files before subfolders).
        truncated: the walk stopped at its limit.
        skipped: one line per kind of entry left out, with a count.
    """

    files: list[Entry] = field(default_factory=list)
    truncated: bool = False
    skipped: list[str] = field(default_factory=list)


@dataclass
class _Folder:
    parts: list[str]
    fd: int | None  # None once closed; reopened from the work dir if still needed
    subfolders: list[str]  # still to visit, last one first


_SKIPPED = {
    "links": "symlinks, never followed",
    "special": "neither files nor folders (pipes, sockets)",
    "unreadable": "folders that could not be read",
    "changed": "entries that changed while being listed",
    "undecodable": "names that are not valid UTF-8",
}


def list_tree(
    root: Path, *, max_files: int = 10_000, max_entries: int = 200_000, max_open: int = 32
) -> Listing:
    """Every regular file under ``root``, walked with no link followed and no recursion.

    A 1,200-deep chain of folders holds two handles at a time; a tree that
    would hold more than ``max_open`` at once has its upper folders closed
    and reopened from the work dir when their turn comes.

    Args:
        root: the work dir.
        max_files: stop (``truncated``) after this many files.
        max_entries: stop (``truncated``) after looking at this many entries.
        max_open: folder handles held at once, at most.

    Raises:
        Refused: the work dir itself cannot be opened.
    """
    return _Walk(root, max_files, max_entries, max_open).run()


class _Walk:
    def __init__(self, root: Path, max_files: int, max_entries: int, max_open: int) -> None:
        self.root = root
        self.max_files, self.max_entries, self.max_open = max_files, max_entries, max_open
        self.listing = Listing()
        self.counts = dict.fromkeys(_SKIPPED, 0)
        self.seen = 0
        self.open = 0
        self.stack: list[_Folder] = []

    def run(self) -> Listing:
        try:
            self._push([], open_folder(self.root, []))
            while self.stack and not self.listing.truncated:
                top = self.stack[-1]
                if not top.subfolders:
                    self._close(top)
                    self.stack.pop()
                    continue
                name = top.subfolders.pop()
                child = self._open_child(top, name)
                if child is None:
                    continue
                if not top.subfolders or self.open >= self.max_open:
                    self._close(top)  # no longer needed, or reopened when it is
                self._push([*top.parts, name], child)
        finally:
            for folder in self.stack:
                self._close(folder)
        self.listing.skipped = [f"{_SKIPPED[k]}: {n:,}" for k, n in self.counts.items() if n]
        return self.listing

    def _push(self, parts: list[str], fd: int) -> None:
        self.open += 1
        folder = _Folder(parts, fd, [])
        self.stack.append(folder)
        self._scan(folder, fd)

    def _close(self, folder: _Folder) -> None:
        if folder.fd is not None:
            os.close(folder.fd)
            folder.fd = None
            self.open -= 1

    def _scan(self, folder: _Folder, fd: int) -> None:
        entries: list[os.DirEntry[str]] = []
        try:
            with os.scandir(fd) as found:
                for entry in found:
                    if self.seen >= self.max_entries:
                        self.listing.truncated = True
                        break
                    self.seen += 1
                    entries.append(entry)
        except OSError:
            self.counts["unreadable"] += 1
            return
        entries.sort(key=lambda e: e.name)
        for entry in entries:
            kind = self._kind(entry)
            if kind == "folder":
                folder.subfolders.append(entry.name)
            elif kind is not None:
                if len(self.listing.files) >= self.max_files:
                    self.listing.truncated = True
                    return
                path = "/".join([*folder.parts, entry.name])
                self.listing.files.append(Entry(path, kind.st_size, kind.st_mtime))
        folder.subfolders.reverse()

    def _kind(self, entry: os.DirEntry[str]) -> os.stat_result | Literal["folder"] | None:
        """A file's stat, "folder", or None for what is skipped (and counted)."""
        try:
            entry.name.encode("utf-8")
            if entry.is_symlink():
                self.counts["links"] += 1
                return None
            if entry.is_dir(follow_symlinks=False):
                return "folder"
            if not entry.is_file(follow_symlinks=False):
                self.counts["special"] += 1
                return None
            return entry.stat(follow_symlinks=False)
        except UnicodeEncodeError:
            self.counts["undecodable"] += 1
        except OSError:
            self.counts["changed"] += 1
        return None

    def _open_child(self, parent: _Folder, name: str) -> int | None:
        fd, reopened = parent.fd, None
        if fd is None:
            try:
                fd = reopened = open_folder(self.root, parent.parts)
            except OSError:
                self.counts["changed"] += 1 + len(parent.subfolders)
                parent.subfolders.clear()
                return None
        try:
            return os.open(name, _DIR, dir_fd=fd)
        except OSError as exc:
            denied = exc.errno in (errno.EACCES, errno.EPERM)
            self.counts["unreadable" if denied else "changed"] += 1
            return None
        finally:
            if reopened is not None:
                os.close(reopened)


def remove_tree(top: Path) -> None:
    """Removes a folder and everything in it, however deep, never following a link.

    A kernel can nest folders past any recursion limit or path length
    (``shutil.rmtree`` recurses, and fails on a chain 1,000 deep), so this holds
    two handles at most: each folder met inside ``top`` is emptied of files and
    its own folders are moved up into ``top`` under fresh names, until ``top``
    is empty. Best effort: what cannot be removed stays.
    """
    try:
        root = os.open(top, _DIR)
    except OSError:
        return
    _empty(root)
    with contextlib.suppress(OSError):
        os.rmdir(top)


def remove_in(folder: int, name: str) -> None:
    """Removes the folder ``name`` of the folder ``folder`` as ``remove_tree`` does.

    For a clean-up that must stay inside a folder it holds: the walk to
    ``folder`` was done once, with no link followed, and nothing here goes
    by a path again. A link or a file at ``name`` is left alone.
    """
    try:
        root = os.open(name, _DIR, dir_fd=folder)
    except OSError:
        return
    _empty(root)
    with contextlib.suppress(OSError):
        os.rmdir(name, dir_fd=folder)


def _empty(root: int) -> None:
    """Empties the folder ``root`` (closing it): two handles at most, however deep."""
    try:
        progress = True
        while progress:
            progress = False
            with os.scandir(root) as found:
                entries = [(e.name, e.is_dir(follow_symlinks=False)) for e in found]
            for name, is_folder in entries:
                with contextlib.suppress(OSError):
                    if not is_folder:
                        os.unlink(name, dir_fd=root)
                    else:
                        _lift_contents(root, name)
                        os.rmdir(name, dir_fd=root)
                    progress = True
    finally:
        os.close(root)


def _lift_contents(root: int, name: str) -> None:
    # The folder's files go; its folders move up into root, to be emptied in turn.
    folder = os.open(name, _DIR, dir_fd=root)
    try:
        with os.scandir(folder) as found:
            entries = [(e.name, e.is_dir(follow_symlinks=False)) for e in found]
        for inner, is_folder in entries:
            with contextlib.suppress(OSError):
                if is_folder:
                    os.rename(
                        inner,
                        f".removing-{secrets.token_hex(8)}",
                        src_dir_fd=folder,
                        dst_dir_fd=root,
                    )
                else:
                    os.unlink(inner, dir_fd=folder)
    finally:
        os.close(folder)
