"""What the tenants file's readers share: a guarded read, and checks that name the fix.

``_config.py`` (the tenants) and ``_jwt_config.py`` (its ``[jwt]`` table) both
refuse a file that is not a regular file or that anyone may write, a key the
format does not have, and a number out of range, each with one line naming
the file, the key and what to write instead.
"""

from __future__ import annotations

import difflib
import math
import os
import stat
import sys
from collections.abc import Mapping
from typing import Any

from .._exceptions import ConfigurationError

__all__ = [
    "FileStamp",
    "known_keys",
    "nearest",
    "positive",
    "read_guarded",
    "shown",
    "toml_loads",
]

# What changes when the file does: its device and inode (an editor's or
# Kubernetes' replace-by-rename), size and modification time.
FileStamp = tuple[int, int, int, int]


def read_guarded(
    path: str,
    name: str,
    *,
    not_file: str,
    writable: str,
    unreadable: str,
    limit: int | None = None,
) -> tuple[bytes, FileStamp]:
    """A file's bytes and stamp, refused if it is not a regular file or anyone may write it.

    The stamp is of the file that was read (its descriptor's), not looked up
    again by name. ``name`` is how messages begin; the other words say what
    to do when the file is not a file, may be written by anyone (after
    "who..."), or cannot be read.
    """
    try:
        # Without O_NONBLOCK a FIFO given by mistake would hold the open until a writer came.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode):
                raise ConfigurationError(f"{name} is not a file: {not_file}")
            if info.st_mode & stat.S_IWOTH:
                raise ConfigurationError(
                    f"{name} may be written by any user, {writable}: chmod o-w {path}"
                )
            with open(fd, "rb", closefd=False) as file:
                data = file.read() if limit is None else file.read(limit + 1)
        finally:
            os.close(fd)
    except OSError as exc:
        raise ConfigurationError(
            f"{name} cannot be read ({exc.strerror or exc}): {unreadable}"
        ) from None
    if limit is not None and len(data) > limit:
        raise ConfigurationError(f"{name} is over {limit} bytes: {not_file}")
    return data, (info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns)


def positive(where: str, key: str, value: Any, *, whole: bool = False) -> int | float:
    # bool is an int to Python: `true` for a quota is a mistake, not 1. TOML has inf
    # and nan too, and a quota of either would be no quota: leaving it out says that.
    if (
        isinstance(value, bool)
        or not isinstance(value, int if whole else (int, float))
        or not (math.isfinite(value) and value > 0)
    ):
        kind = "a whole number" if whole else "a number"
        raise ConfigurationError(f"{where}, key {key}: write {kind} above 0, not {shown(value)}")
    return value


def known_keys(table: Mapping[str, Any], known: tuple[str, ...], where: str, prefix: str) -> None:
    for key in table:
        if key not in known:
            raise ConfigurationError(
                f"{where}: unknown key {prefix}{key}{nearest(key, known)}: "
                f"the keys there are {', '.join(known)}"
            )


def toml_loads(text: str) -> dict[str, Any]:
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - tomllib came with Python 3.11; tomli is its backport
        try:
            import tomli as tomllib
        except ModuleNotFoundError:
            raise ConfigurationError(
                "reading a tenants file needs Python 3.11 or later, or the tomli package "
                "(pip install tomli)"
            ) from None
    return tomllib.loads(text)


def nearest(given: str, known: tuple[str, ...]) -> str:
    close = difflib.get_close_matches(given, known, n=1)
    return f" (did you mean {close[0]}?)" if close else ""


def shown(value: Any) -> str:
    """A value for an error message, cut short: a message is one line."""
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."
