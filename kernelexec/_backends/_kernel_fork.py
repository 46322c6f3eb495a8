"""A kernel forked from another kernel, seen from the owner: ``poll()`` and ``pid``.

Its parent is the kernel it was forked from, not this process, so it cannot
be waited for here: its liveness comes from a pidfd (not fooled by a reused
pid), and its exit status from the file its supervisor writes as it ends
(``guard.protect(status_file=...)``).
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

from .._kernel.fork import ended

__all__ = ["KernelFork"]

_STATUS_WAIT = 1.0  # seconds an ended fork's supervisor gets to have written its status


class KernelFork:
    def __init__(self, pid: int, status_file: Path) -> None:
        self.pid = pid
        self.returncode: int | None = None
        self._status_file = status_file
        self._pidfd: int | None = os.pidfd_open(pid)

    def poll(self) -> int | None:
        if self.returncode is not None:
            return self.returncode
        if self._pidfd is None or not ended(self._pidfd):
            return None
        deadline = time.monotonic() + _STATUS_WAIT
        while True:
            try:
                self.returncode = int(self._status_file.read_text().strip())
                return self.returncode
            except (OSError, ValueError):
                if time.monotonic() >= deadline:
                    # A supervisor ends without writing only when it is SIGKILLed.
                    self.returncode = -signal.SIGKILL
                    return self.returncode
                time.sleep(0.01)

    def release(self) -> None:
        if self._pidfd is not None:
            os.close(self._pidfd)
            self._pidfd = None
