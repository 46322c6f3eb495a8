"""Whole trees in a work dir: every regular file listed, or everything removed.

Both walk without recursion and hold a bounded number of folder handles: a
kernel can nest folders deeper than any recursion limit or path length.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from ._open import FOLDER_FLAGS, open_folder

__all__ = ["Entry", "Listing", "list_tree", "remove_in", "remove_tree"]


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
            return os.open(name, FOLDER_FLAGS, dir_fd=fd)
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
        root = os.open(top, FOLDER_FLAGS)
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
        root = os.open(name, FOLDER_FLAGS, dir_fd=folder)
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
    folder = os.open(name, FOLDER_FLAGS, dir_fd=root)
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
