"""E2B's paths, read as names under the sandbox's work dir.

An E2B sandbox is a whole machine and its SDK names files by absolute path, its
user's home ``/home/user`` the default. Here the sandbox is a session, and what it
holds is its work dir: ``/home/user`` is the work dir, a relative path is read
from there (as envd reads one), and any other path is refused, whatever it holds
(``/etc/passwd``, ``/home/user/../../etc``). The names are then walked from a
handle on the work dir with no link followed (``kernelexec/_workdir/``), as every
other door does.
"""

from __future__ import annotations

import os
import posixpath
from pathlib import Path

from ... import _workdir
from .._errors import ApiError

__all__ = ["HOME", "chdir_code", "e2b_path", "parts_for"]

HOME = "/home/user"


def parts_for(path: str, *, what: str = "path") -> list[str]:
    """The names under the work dir that an E2B path means ([] for the home itself).

    Raises:
        ApiError: 400 for no path or a malformed one, 403 for one outside the home.
    """
    if not isinstance(path, str) or not path or "\0" in path:
        raise ApiError(400, "invalid_path", f"{what} must be a non-empty path")
    # Lexical, and so safe: the names are then walked with no link followed.
    full = posixpath.normpath(posixpath.join(HOME, path))
    if full != HOME and not full.startswith(HOME + "/"):
        raise ApiError(
            403,
            "outside_work_dir",
            f"{path[:200]!r} is outside the sandbox: a kernelexec sandbox holds only {HOME} "
            "(its session's work dir) and what is below it",
        )
    return [] if full == HOME else full[len(HOME) + 1 :].split("/")


def e2b_path(parts: list[str]) -> str:
    """The E2B path of names under the work dir."""
    return posixpath.join(HOME, *parts) if parts else HOME


def chdir_code(work_dir: Path, cwd: str) -> str | None:
    """Code that moves a kernel from the work dir to the folder ``cwd`` names (None
    for the home itself, where it starts).

    Raises:
        ApiError: the path is refused (above), or names no folder (400).
    """
    parts = parts_for(cwd, what="cwd")
    if not parts:
        return None
    try:
        os.close(_workdir.open_folder(work_dir, parts))
    except _workdir.Refused as exc:
        raise ApiError(
            400, "invalid_cwd", f"cwd {cwd[:200]!r} is no folder of the sandbox: {exc}"
        ) from None
    # The kernel's own move, so nothing on our side goes through the folder: a
    # kernel may go anywhere it can reach, while our writes stay in the work dir.
    return f"import os as _kx_os; _kx_os.chdir({'/'.join(parts)!r}); del _kx_os"
