"""A session's files over HTTP, confined to its work dir.

A path comes in once decoded (by the HTTP server) and is refused when it, or
any further decoding of it, is empty, absolute, holds a ``..`` segment, a
backslash or a NUL. What is left is resolved (symlinks followed) and must
still lie inside the work dir. Nothing here decodes a path a second time, so
an encoded name can only ever name a file literally.
"""

from __future__ import annotations

import asyncio
import os
import secrets
from collections.abc import AsyncIterator
from pathlib import Path
from urllib.parse import unquote

from .._remote_models import FileInfo
from ._errors import ApiError

__all__ = ["MAX_LISTED", "list_files", "resolve_inside", "write_file"]

MAX_LISTED = 10_000


def _why_unsafe(path: str) -> str | None:
    if not path:
        return "the path is empty"
    if "\0" in path:
        return "the path holds a NUL character"
    if "\\" in path:
        return "the path holds a backslash; use / between folders"
    if path.startswith("/") or (len(path) > 1 and path[1] == ":"):
        return "the path is absolute; give it relative to the session's work dir"
    if ".." in path.split("/"):
        return "the path holds a '..' segment"
    return None


def resolve_inside(root: Path, raw: str) -> Path:
    """The file ``raw`` names in ``root`` (an absolute, resolved dir).

    Raises:
        ApiError: 400 for a path that is malformed or tries to leave, 403 for
            one that leaves through a symlink.
    """
    decoded, seen = raw, set()
    while decoded not in seen:  # %2e%2e, %252e%252e, ... each decoding checked
        seen.add(decoded)
        why = _why_unsafe(decoded)
        if why is not None:
            raise ApiError(400, "invalid_path", f"{why}: {raw[:200]!r}")
        decoded = unquote(decoded)
    target = (root / raw).resolve()
    if not target.is_relative_to(root):
        raise ApiError(
            403,
            "outside_work_dir",
            f"{raw[:200]!r} leads outside the session's work dir (a symlink?)",
        )
    return target


def _list(root: Path) -> tuple[list[FileInfo], bool]:
    found: list[FileInfo] = []
    for folder, dirs, names in os.walk(root):
        dirs.sort()
        for name in sorted(names):
            path = Path(folder, name)
            try:
                if path.is_symlink() and not path.resolve().is_relative_to(root):
                    continue
                stat = path.stat()
            except OSError:
                continue  # gone since the walk saw it, or a dangling link
            if len(found) == MAX_LISTED:
                return found, True
            found.append(FileInfo(path.relative_to(root).as_posix(), stat.st_size, stat.st_mtime))
    return found, False


async def list_files(root: Path) -> tuple[list[FileInfo], bool]:
    """Every file under ``root`` (at most MAX_LISTED) and whether the list was cut."""
    return await asyncio.to_thread(_list, root)


async def write_file(root: Path, raw: str, chunks: AsyncIterator[bytes]) -> FileInfo:
    """Writes an upload to ``raw`` in ``root``: whole, or (on any failure) not at all."""
    target = resolve_inside(root, raw)
    if target == root or target.is_dir():
        raise ApiError(400, "not_a_file", f"{raw[:200]!r} is a folder; name a file")
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ApiError(
            409, "cannot_create", f"cannot create the folder for {raw[:200]!r}: {exc.strerror}"
        ) from None
    partial = target.parent / f".upload-{secrets.token_hex(8)}.part"
    try:
        with partial.open("wb") as out:
            async for chunk in chunks:
                await asyncio.to_thread(out.write, chunk)
        os.replace(partial, target)
    finally:
        partial.unlink(missing_ok=True)
    stat = target.stat()
    return FileInfo(target.relative_to(root).as_posix(), stat.st_size, stat.st_mtime)
