"""A file opened in a work dir, read from a coroutine."""

from __future__ import annotations

import asyncio
import os
from typing import BinaryIO

__all__ = ["Reading"]


class Reading:
    """A file opened (with no link followed), its size and time as opened, read in turns.

    Every read is of this very file: never of its path opened again.
    """

    def __init__(self, file: BinaryIO) -> None:
        info = os.fstat(file.fileno())
        self.file, self.size, self.modified = file, info.st_size, info.st_mtime

    async def read(self, most: int) -> bytes:
        """Up to ``most`` more bytes; empty at the end."""
        return await asyncio.to_thread(self.file.read, most) if most > 0 else b""

    async def close(self) -> None:
        self.file.close()
