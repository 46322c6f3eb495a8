"""A file someone sends into a work dir (``PUT .../files/{path}``): whole, or not at all."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Sequence
from pathlib import Path

from ._open import Refused, kind_of, link_message, open_folder, parts_of
from ._write import temp_file, write_all

__all__ = ["Upload"]


class Upload:
    """A file someone sends into a work dir: whole at its name, or not at all.

    The bytes go to a temp file in the target's folder (held open from the
    start), which ``commit`` renames over the name; ``abort`` removes it.
    Unlike kernelexec's own files, a link on the way or at the name is
    refused: an upload does not repair the session's files.
    """

    def __init__(self, root: Path, relative: str | Sequence[str]) -> None:
        self.parts = parts_of(relative)
        self._folder = open_folder(root, self.parts[:-1], create=True)
        try:
            self._temp, self._fd = temp_file(self._folder)
        except BaseException:
            os.close(self._folder)
            raise

    def write(self, data: bytes) -> None:
        write_all(self._fd, data)

    def commit(self) -> os.stat_result:
        """Puts the file in place and returns its stat; the upload is then closed.

        Raises:
            Refused: the name is a folder or a link (the temp file is removed).
        """
        name, shown = self.parts[-1], "/".join(self.parts)
        try:
            kind = kind_of(self._folder, name)  # for the refusal only: the rename never follows
            if kind == "folder":
                raise Refused("not_a_file", f"{shown!r} is a folder; name a file")
            if kind == "link":
                raise Refused("link", link_message(shown))
            os.rename(self._temp, name, src_dir_fd=self._folder, dst_dir_fd=self._folder)
            return os.fstat(self._fd)
        except BaseException:
            self.abort()
            raise
        finally:
            self._close()

    def abort(self) -> None:
        """Removes the temp file, if it is still there."""
        with contextlib.suppress(OSError):
            os.unlink(self._temp, dir_fd=self._folder)
        self._close()

    def _close(self) -> None:
        for fd in (self._fd, self._folder):
            with contextlib.suppress(OSError):
                os.close(fd)
        self._fd = self._folder = -1
