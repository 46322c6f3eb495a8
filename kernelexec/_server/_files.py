"""A session's files over HTTP, confined to its work dir.

The routes check a path's form (``_paths``); this module opens it, through
``_workdir``: every name is walked from a handle on the work dir and no link
is followed, so a kernel that swaps a folder for a link during a request
gets nothing out of the work dir and puts nothing outside it. A download
streams the very file that was opened, never a path opened again.
"""

from __future__ import annotations

import mimetypes
from collections.abc import AsyncIterator
from email.utils import formatdate
from pathlib import Path
from typing import Literal

from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from .. import _workdir
from .._exceptions import DiskSpaceError
from .._remote_models import FileInfo
from .._session._files import FileReader, WorkDirAccess
from .._state import _disk
from .._times import iso
from ._errors import ApiError, disk_full

__all__ = ["MAX_LISTED", "FileBody", "download", "list_files", "read_notebook", "write_file"]

MAX_LISTED = 10_000
_CHUNK = 256 * 1024

# What each refusal means to a reader and to a writer: (status, code).
_ON_READ: dict[str, tuple[int, str]] = {
    "invalid": (400, "invalid_path"),
    "too_long": (404, "file_not_found"),
    "link": (403, "outside_work_dir"),
    "missing": (404, "file_not_found"),
    "not_a_file": (404, "not_a_file"),  # a folder: no file by that name (the schema's path)
    "not_a_folder": (404, "file_not_found"),
    "denied": (403, "permission_denied"),
    "busy": (409, "busy"),
}
_ON_WRITE = {
    **_ON_READ,
    "too_long": (409, "cannot_create"),
    "not_a_file": (409, "not_a_file"),  # a folder holds the name: it conflicts, as in mkdir
    "not_a_folder": (409, "cannot_create"),
    "missing": (409, "cannot_create"),
}


def _api_error(exc: _workdir.Refused, on: Literal["read", "write"]) -> ApiError:
    status, code = (_ON_READ if on == "read" else _ON_WRITE)[exc.reason]
    hint = "; GET .../files lists the files" if status == 404 else ""
    return ApiError(status, code, f"{exc}{hint}")


async def list_files(files: WorkDirAccess) -> tuple[list[FileInfo], bool, list[str]]:
    """Every regular file of a session's work dir (at most MAX_LISTED), whether the
    list was cut, and what was left out (links, pipes, unreadable folders), counted."""
    try:
        found = await files.listing(MAX_LISTED)
    except _workdir.Refused as exc:
        if exc.reason == "missing":
            return [], False, []
        raise _api_error(exc, "read") from None
    listed = [FileInfo(e.path, e.size, iso(e.modified)) for e in found.files]
    return listed, found.truncated, found.skipped


class FileBody(Response):
    """A regular file already opened (no link followed), streamed in chunks.

    The length and type are the opened file's; the file is closed once sent,
    or when the client goes away.
    """

    def __init__(self, file: FileReader, name: str, *, head: bool = False) -> None:
        self.file, self.size, self.head = file, file.size, head
        super().__init__(
            headers={
                "content-length": str(file.size),
                "last-modified": formatdate(file.modified, usegmt=True),
            },
            media_type=mimetypes.guess_type(name)[0] or "application/octet-stream",
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await send(
                {
                    "type": "http.response.start",
                    "status": self.status_code,
                    "headers": self.raw_headers,
                }
            )
            left = 0 if self.head else self.size
            while True:
                chunk = await self.file.read(min(_CHUNK, left)) if left else b""
                left -= len(chunk)
                more = bool(chunk) and left > 0
                await send({"type": "http.response.body", "body": chunk, "more_body": more})
                if not more:
                    return
        finally:
            await self.file.close()


async def download(files: WorkDirAccess, raw: str, *, head: bool = False) -> FileBody:
    """The response for a file of the work dir.

    Raises:
        ApiError: 400/403/404 naming why the path cannot be served.
    """
    try:
        file = await files.open_read(raw)
    except _workdir.Refused as exc:
        raise _api_error(exc, "read") from None
    return FileBody(file, raw, head=head)


async def write_file(
    files: WorkDirAccess,
    root: Path,
    raw: str,
    chunks: AsyncIterator[bytes],
    *,
    notebook: Path | None = None,
    size: int = 0,
) -> FileInfo:
    """Writes an upload to ``raw`` in the session's files: whole, or (on any failure)
    not at all.

    Args:
        files: the session's files, where the upload goes.
        root: the work dir, where the transcript is.
        raw: the path, relative to it.
        chunks: the body.
        notebook: the session's transcript, which an upload may not replace.
        size: the length the client declared, checked against the disk's room.

    Raises:
        ApiError: the path is refused (4xx, saying why), the disk has no room
            for it (507; for a declared length, before a byte is written), or
            the body failed.
    """
    try:
        parts = _workdir.parts_of(raw)
        if notebook is not None and _workdir.locate(notebook, root) == (root, parts):
            raise ApiError(
                409,
                "reserved",
                f"{raw[:200]!r} is the session's transcript, which kernelexec writes; "
                "upload under another name",
            )
        upload = await files.upload(parts, size)
    except _workdir.Refused as exc:
        raise _api_error(exc, "write") from None
    except DiskSpaceError as exc:
        raise disk_full(exc) from None
    except OSError as exc:
        if _disk.is_full(exc):
            raise disk_full(exc) from None
        raise
    try:
        async for chunk in chunks:
            await upload.write(chunk)
    except BaseException as exc:
        await upload.abort()
        if _disk.is_full(exc):
            raise disk_full(exc) from None
        raise
    try:
        written, modified = await upload.commit()
    except _workdir.Refused as exc:
        raise _api_error(exc, "write") from None
    return FileInfo("/".join(parts), written, iso(modified))


def read_notebook(root: Path, notebook: Path) -> bytes | None:
    """The transcript's bytes, read whole (None when there is none yet).

    Whole, because the file is replaced by rename: a streamed read could
    straddle two versions.

    Raises:
        ApiError: 409 when something other than a regular file (a link the
            session's code made) holds the transcript's name.
    """
    try:
        return _workdir.read_kept(notebook, root)
    except _workdir.Refused as exc:
        raise ApiError(
            409,
            "notebook_unavailable",
            f"{exc}. The session's code replaced its transcript; the next execution "
            "writes it anew.",
        ) from None
