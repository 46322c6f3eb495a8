"""What a file path in a URL may be: one rule, stated in the schema and checked by the routes.

A path names a file relative to the session's work dir: folder names joined
by ``/``, none empty, ``.`` or ``..``, none over 255 characters, with no NUL,
no backslash and no percent-escape (the URL's own encoding is decoded once;
a name that still holds ``%2e`` is refused rather than decoded again, so no
layer can read it as something else). The schema's pattern and the routes'
check are built from the same expressions, so a path the schema allows is
never refused for its form, and a path it forbids always is.
"""

from __future__ import annotations

import re
from typing import Any

from ._errors import ApiError

__all__ = [
    "MAX_NAME_BYTES",
    "MAX_PATH_BYTES",
    "MAX_PATH_CHARS",
    "check_file_path",
    "path_schema",
    "too_long",
]

# Well under the file system's 4,096 bytes for a whole path, work dir included.
MAX_PATH_CHARS = 1024
MAX_NAME_BYTES = 255  # what a file system allows one name (in bytes, not characters)
MAX_PATH_BYTES = 3072  # leaves room for the work dir in the file system's 4,096
_NAME = r"[^/\\\x00]{1,255}"
_SHAPE = rf"^{_NAME}(/{_NAME})*$"
# Each forbidden form, with why; the schema says "not any of these".
_FORBIDDEN = (
    (r"(^|/)\.\.?(/|$)", "holds a '..' segment (or a '.' one)"),
    (r"%[0-9A-Fa-f]{2}", "holds a percent-escape (%2e...): name files literally"),
    (r"^[\s\S]:", "starts like a drive name (C:)"),
)
_SHAPE_RE = re.compile(_SHAPE)
_FORBIDDEN_RE = [(re.compile(pattern), why) for pattern, why in _FORBIDDEN]


def path_schema() -> dict[str, Any]:
    """The JSON Schema of a file path parameter."""
    return {
        "type": "string",
        "minLength": 1,
        "maxLength": MAX_PATH_CHARS,
        "pattern": _SHAPE,
        "not": {"anyOf": [{"pattern": pattern} for pattern, _ in _FORBIDDEN]},
    }


def _why_refused(path: str) -> str | None:
    if not path:
        return "is empty"
    if len(path) > MAX_PATH_CHARS:
        return f"is over {MAX_PATH_CHARS:,} characters"
    if "\0" in path:
        return "holds a NUL character"
    if "\\" in path:
        return "holds a backslash; use / between folders"
    if path.startswith("/"):
        return "is absolute; give it relative to the session's work dir"
    if not _SHAPE_RE.fullmatch(path):
        return "has an empty name (// or a trailing /) or a name over 255 characters"
    for pattern, why in _FORBIDDEN_RE:
        if pattern.search(path):
            return why
    return None


def check_file_path(path: str) -> str:
    """``path`` if the schema allows it.

    Raises:
        ApiError: 400 naming what is wrong with the path.
    """
    why = _why_refused(path)
    if why is not None:
        raise ApiError(400, "invalid_path", f"the path {why}: {path[:200]!r}")
    return path


def too_long(path: str) -> bool:
    """``path``, or a name in it, is longer in UTF-8 than a file system allows.

    The schema counts characters, a file system bytes; such a path is well
    formed, but no file can have it.
    """
    encoded = path.encode("utf-8", "surrogatepass")
    return len(encoded) > MAX_PATH_BYTES or any(
        len(name) > MAX_NAME_BYTES for name in encoded.split(b"/")
    )
