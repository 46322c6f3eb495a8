"""A session's files as every door reads and writes them, wherever its kernel runs.

The doors (the server's files routes, MCP's ``list_files`` and ``read_file``)
ask the session for its ``WorkDirAccess`` (``AsyncSession.files``) and never
look at a path themselves. ``LocalAccess`` is a work dir on this machine,
through ``_workdir``; a Ray node's kernel without shared storage has one that
asks its node's host (``_ray/_files.py``), which walks the node's work
dir with the same ``_workdir`` functions, on the node. Either way a reader holds the very file
that was opened, and an upload lands whole or not at all.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

from .._exceptions import FileRefusedError
from .._remote_models import FileInfo
from .._state import _disk
from .._times import iso
from .._workdir import Listing, Reading, Refused, Upload, list_tree, locate, open_read, parts_of

__all__ = [
    "MAX_LISTED",
    "FileReader",
    "FileWriter",
    "LocalAccess",
    "WorkDirAccess",
    "list_files",
    "read_file",
    "read_up_to",
    "write_file",
]

MAX_LISTED = 10_000  # files a listing shows at most


class FileReader(Protocol):
    """A file opened for reading: its size and time when opened, then its bytes."""

    size: int
    modified: float

    async def read(self, most: int) -> bytes:
        """Up to ``most`` more bytes; empty at the end."""
        ...

    async def close(self) -> None: ...


class FileWriter(Protocol):
    """A file being sent into the work dir: whole at its name on ``commit``, or not at all."""

    async def write(self, data: bytes) -> None: ...

    async def commit(self) -> tuple[int, float]:
        """Puts the file in place; its size and modification time.

        Raises:
            Refused: a folder or a link holds the name.
        """
        ...

    async def abort(self) -> None: ...


class WorkDirAccess(Protocol):
    """A session's work dir, wherever it is.

    Every method raises ``Refused`` for a path that is malformed, climbs,
    leads through a link or is no regular file, as the functions of this
    ``_workdir`` functions do.
    """

    async def listing(self, max_files: int) -> Listing: ...

    async def open_read(self, relative: str | Sequence[str]) -> FileReader: ...

    async def upload(self, relative: str | Sequence[str], size: int) -> FileWriter:
        """A writer for the file; ``size`` (the length declared, 0 if none) is checked
        against the room on the disk that will hold it.

        Raises:
            DiskSpaceError: that disk has no room for ``size`` bytes.
        """
        ...

    def where(self, relative: str) -> str:
        """Where the file is, in words, for a message to a person."""
        ...


class LocalAccess:
    """A work dir on this machine."""

    def __init__(self, root: Path) -> None:
        self.root = root

    async def listing(self, max_files: int) -> Listing:
        return await asyncio.to_thread(list_tree, self.root, max_files=max_files)

    async def open_read(self, relative: str | Sequence[str]) -> FileReader:
        return Reading(await asyncio.to_thread(open_read, self.root, relative))

    async def upload(self, relative: str | Sequence[str], size: int) -> FileWriter:
        parts = parts_of(relative)
        upload = await asyncio.to_thread(Upload, self.root, parts)
        room_for(upload, size, self.root, parts)
        return _LocalWriter(upload)

    def where(self, relative: str) -> str:
        return str(self.root.resolve().joinpath(*parts_of(relative)))


def room_for(upload: Upload, size: int, root: Path, parts: Sequence[str]) -> None:
    """Aborts ``upload`` and raises ``DiskSpaceError`` when the disk holding ``root`` has no
    room for the ``size`` bytes declared (here, or on a Ray node by its host)."""
    try:
        _disk.check(size, root, budget=None, what=_upload_of(parts), setting="")
    except BaseException:
        upload.abort()
        raise


def _upload_of(parts: Sequence[str]) -> str:
    return f"the upload of {'/'.join(parts)[:200]!r}"


class _LocalWriter:
    def __init__(self, upload: Upload) -> None:
        self.upload = upload

    async def write(self, data: bytes) -> None:
        await asyncio.to_thread(self.upload.write, data)

    async def commit(self) -> tuple[int, float]:
        info = await asyncio.to_thread(self.upload.commit)
        return info.st_size, info.st_mtime

    async def abort(self) -> None:
        self.upload.abort()


# -- the library's own files API (AsyncSession.files, download, upload)


async def list_files(files: WorkDirAccess) -> list[FileInfo]:
    """The regular files of a session's (at most ``MAX_LISTED``), as a server lists them."""
    try:
        found = await files.listing(MAX_LISTED)
    except Refused as exc:
        if exc.reason == "missing":
            return []
        raise FileRefusedError(exc.reason, str(exc)) from None
    return [FileInfo(e.path, e.size, iso(e.modified)) for e in found.files]


async def read_file(files: WorkDirAccess, path: str) -> bytes:
    """The file's bytes, whole, from the very file opened."""
    try:
        file = await files.open_read(path)
    except Refused as exc:
        raise FileRefusedError(exc.reason, str(exc)) from None
    try:
        return await read_up_to(file, None)
    finally:
        await file.close()


async def read_up_to(file: FileReader, most: int | None) -> bytes:
    """The file's next bytes, at most ``most`` (None: to its end), read in chunks."""
    chunks: list[bytes] = []
    got = 0
    while most is None or got < most:
        chunk = await file.read(_CHUNK if most is None else min(_CHUNK, most - got))
        if not chunk:
            break
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


async def write_file(
    files: WorkDirAccess, path: str, data: bytes | str, root: Path, notebook: Path
) -> FileInfo:
    """``data`` at ``path`` (text as UTF-8), whole or not at all; never the transcript."""
    body = data.encode() if isinstance(data, str) else bytes(data)
    try:
        parts = parts_of(path)
        if locate(notebook, root) == (root, parts):
            raise FileRefusedError(
                "reserved", f"{path[:200]!r} is the session's transcript, which kernelexec writes"
            )
        upload = await files.upload(parts, len(body))
        try:
            for start in range(0, len(body), _CHUNK):
                await upload.write(body[start : start + _CHUNK])
            size, modified = await upload.commit()
        except BaseException:
            await upload.abort()
            raise
    except Refused as exc:
        raise FileRefusedError(exc.reason, str(exc)) from None
    return FileInfo("/".join(parts), size, iso(modified))


_CHUNK = 1 << 20
