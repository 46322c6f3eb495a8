"""A session's files, as the MCP tools may show them: never outside its work dir.

The rules are the HTTP server's, both through ``_workdir``: relative paths
only, no ``..`` and no NUL, every name walked from a handle on the work dir
with no link followed (a link is refused wherever it points), and a file is
read from the handle that was opened, never by its path again.
"""

from __future__ import annotations

from pathlib import Path

from .. import _workdir
from .._remote_models import FileInfo
from .._server._errors import ApiError
from .._server._files import list_files as _list_files
from .._session._files import WorkDirAccess, read_up_to

__all__ = ["FileRefused", "files_in", "read_head", "read_notebook", "where"]


class FileRefused(Exception):
    """A path that is not a file inside the work dir; the message says why."""


async def where(files: WorkDirAccess, path: str) -> str:
    """Where the file ``path`` names in a session's files is, to name it in messages.

    Checked by opening it, with no link followed; read it with ``read_head``,
    never through what this returns.

    Raises:
        FileRefused: the path is malformed, absolute, climbs or leads through
            a link, or is no regular file.
    """
    await read_head(files, path, 0)
    return files.where(path)


async def read_head(
    files: WorkDirAccess, path: str, limit: int, *, whole: bool = False
) -> tuple[bytes, int]:
    """At most the first ``limit`` bytes of the file ``path`` names, and its whole size.

    Never more of the file in memory than ``limit``: a kernel can write a file
    of any size, and the MCP server is shared by every session. With
    ``whole``, a file over ``limit`` is not read at all (its bytes come back empty).

    Raises:
        FileRefused: as for ``where``.
    """
    try:
        file = await files.open_read(path)
    except _workdir.Refused as exc:
        raise FileRefused(_message(exc, path)) from None
    try:
        if whole and file.size > limit:
            return b"", file.size
        return await read_up_to(file, limit), file.size
    finally:
        await file.close()


def read_notebook(work_dir: Path, notebook: Path) -> bytes | None:
    """A session's transcript, read whole; None before anything ran.

    Raises:
        FileRefused: the session's code put something else (a link) in its place.
    """
    try:
        return _workdir.read_kept(notebook, work_dir)
    except _workdir.Refused as exc:
        raise FileRefused(
            f"{exc}. The session's code replaced its transcript; the next execution writes it anew."
        ) from None


async def files_in(files: WorkDirAccess) -> tuple[list[FileInfo], bool, list[str]]:
    """Every file of a session's as the HTTP API lists them, whether the list was
    cut, and what was left out (links, pipes), counted."""
    try:
        return await _list_files(files)
    except ApiError as exc:
        raise FileRefused(exc.message) from None


def _message(exc: _workdir.Refused, path: str) -> str:
    if exc.reason in ("missing", "not_a_folder"):
        return f"no file {path!r} in the work dir; list_files shows what is there"
    return str(exc)
