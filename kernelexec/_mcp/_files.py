"""A session's files, as the MCP tools may show them: never outside its work dir.

The rules are the HTTP server's (``_server/_files.py``), so both APIs refuse
and list the same paths: relative only, no ``..``, no NUL or backslash, and a
symlink may not lead out of the work dir.
"""

from __future__ import annotations

from pathlib import Path

from .._remote_models import FileInfo
from .._server._errors import ApiError
from .._server._files import list_files as _list_files
from .._server._files import resolve_inside

__all__ = ["FileRefused", "confined", "files_in"]


class FileRefused(Exception):
    """A path that is not a file inside the work dir; the message says why."""


def confined(work_dir: Path, path: str) -> Path:
    """The file ``path`` names inside ``work_dir``.

    Raises:
        FileRefused: the path is malformed, absolute, climbs or leads out, or is no file.
    """
    root = work_dir.resolve()
    try:
        target = resolve_inside(root, path)
    except ApiError as exc:
        raise FileRefused(exc.message) from None
    if not target.is_file():
        raise FileRefused(f"no file {path!r} in the work dir; list_files shows what is there")
    return target


async def files_in(work_dir: Path) -> tuple[list[FileInfo], bool]:
    """Every file under ``work_dir`` as the HTTP API lists them, and whether the list was cut."""
    return await _list_files(work_dir.resolve())
