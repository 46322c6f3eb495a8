"""envd's filesystem service on a work dir: stat, list, remove, make a folder, move.

Blocking, for a thread. Every path is walked from a handle on the work dir with
no link followed (``_workdir.open_folder``), and the last name is used relative
to the folder so reached (``dir_fd``), never by a path again: a link is listed
and removed as a link, never gone through. Each answer is envd's ``EntryInfo``
as JSON (protobuf's JSON names).
"""

from __future__ import annotations

import os
import stat
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from ... import _workdir
from ._paths import e2b_path

__all__ = ["FsError", "list_dir", "make_dir", "move", "remove", "stat_entry"]

MAX_ENTRIES = 10_000  # entries one ListDir answers


class FsError(Exception):
    """A refusal, with the Connect code it is answered with."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


_BY_REASON = {
    "missing": "not_found",
    "not_a_folder": "not_found",
    "link": "permission_denied",
    "denied": "permission_denied",
    "invalid": "invalid_argument",
    "too_long": "invalid_argument",
}


def _folder(work_dir: Path, parts: list[str], *, create: bool = False) -> int:
    try:
        return _workdir.open_folder(work_dir, parts, create=create)
    except _workdir.Refused as exc:
        raise FsError(_BY_REASON.get(exc.reason, "failed_precondition"), str(exc)) from None


def _entry(folder: int, name: str, parts: list[str]) -> dict[str, Any]:
    info = os.stat(name, dir_fd=folder, follow_symlinks=False)
    if stat.S_ISDIR(info.st_mode):
        kind = "FILE_TYPE_DIRECTORY"
    elif stat.S_ISLNK(info.st_mode):
        kind = "FILE_TYPE_SYMLINK"
    else:
        kind = "FILE_TYPE_FILE"
    modified = datetime.fromtimestamp(info.st_mtime, timezone.utc)
    return {
        "name": parts[-1] if parts else "user",
        "type": kind,
        "path": e2b_path(parts),
        "size": str(info.st_size),
        "mode": stat.S_IMODE(info.st_mode),
        "permissions": stat.filemode(info.st_mode),
        "owner": str(info.st_uid),
        "group": str(info.st_gid),
        "modifiedTime": modified.strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
        "isSymlink": kind == "FILE_TYPE_SYMLINK",
    }


def stat_entry(work_dir: Path, parts: list[str]) -> dict[str, Any]:
    if not parts:
        folder = _folder(work_dir, [])
        try:
            return _entry(folder, ".", [])
        finally:
            os.close(folder)
    folder = _folder(work_dir, parts[:-1])
    try:
        return _entry(folder, parts[-1], parts)
    except FileNotFoundError:
        raise FsError("not_found", f"no file or folder {e2b_path(parts)}") from None
    finally:
        os.close(folder)


def list_dir(work_dir: Path, parts: list[str], depth: int) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    _list_into(found, work_dir, parts, max(depth, 1))
    return found


def _list_into(found: list[dict[str, Any]], work_dir: Path, parts: list[str], depth: int) -> None:
    folder = _folder(work_dir, parts)
    try:
        names = sorted(os.listdir(folder))
        for name in names:
            if len(found) >= MAX_ENTRIES:
                return
            try:
                entry = _entry(folder, name, [*parts, name])
            except FileNotFoundError:
                continue  # gone meanwhile
            found.append(entry)
            if depth > 1 and entry["type"] == "FILE_TYPE_DIRECTORY":
                try:
                    _list_into(found, work_dir, [*parts, name], depth - 1)
                except FsError:
                    continue  # swapped for a link or removed meanwhile: not followed
    finally:
        os.close(folder)


def remove(work_dir: Path, parts: list[str]) -> None:
    if not parts:
        raise FsError("permission_denied", "the sandbox's home cannot be removed")
    folder = _folder(work_dir, parts[:-1])
    try:
        name = parts[-1]
        try:
            info = os.stat(name, dir_fd=folder, follow_symlinks=False)
        except FileNotFoundError:
            raise FsError("not_found", f"no file or folder {e2b_path(parts)}") from None
        if stat.S_ISDIR(info.st_mode):
            _workdir.remove_in(folder, name)
        else:
            os.unlink(name, dir_fd=folder)  # a link is removed, not what it points to
    finally:
        os.close(folder)


def make_dir(work_dir: Path, parts: list[str]) -> dict[str, Any]:
    if not parts:
        raise FsError("already_exists", "the sandbox's home exists")
    folder = _folder(work_dir, parts[:-1], create=True)
    try:
        try:
            os.mkdir(parts[-1], dir_fd=folder)
        except FileExistsError:
            raise FsError("already_exists", f"{e2b_path(parts)} exists") from None
        return _entry(folder, parts[-1], parts)
    finally:
        os.close(folder)


def move(work_dir: Path, source: list[str], target: list[str]) -> dict[str, Any]:
    if not source or not target:
        raise FsError("permission_denied", "the sandbox's home cannot be moved or replaced")
    old = _folder(work_dir, source[:-1])
    try:
        new = _folder(work_dir, target[:-1], create=True)
        try:
            try:
                os.rename(source[-1], target[-1], src_dir_fd=old, dst_dir_fd=new)
            except FileNotFoundError:
                raise FsError("not_found", f"no file or folder {e2b_path(source)}") from None
            except OSError as exc:
                raise FsError("failed_precondition", f"cannot move: {exc.strerror}") from None
            return _entry(new, target[-1], target)
        finally:
            os.close(new)
    finally:
        os.close(old)
