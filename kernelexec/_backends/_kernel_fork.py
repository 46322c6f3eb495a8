"""Kernels this process did not start itself, seen from their owner: ``poll()`` and ``pid``.

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

__all__ = ["KernelFork", "PidfdProcess"]

_STATUS_WAIT = 1.0  # seconds an ended fork's supervisor gets to have written its status
_STATUS_BYTES = 32


class PidfdProcess:
    """A process this one did not start: ``poll()``, ``pid`` and ``returncode`` as a ``Popen``'s.

    Its liveness comes from a pidfd, which a reused pid cannot fool; how its
    exit status is learnt is the subclass's (``_exit_status``).
    """

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.returncode: int | None = None
        self._pidfd: int | None = os.pidfd_open(pid)

    def poll(self) -> int | None:
        if self.returncode is not None:
            return self.returncode
        if self._pidfd is None or not ended(self._pidfd):
            return None
        self.returncode = self._exit_status()
        return self.returncode

    def release(self) -> None:
        """Done with the (ended) process: its pidfd is closed."""
        if self._pidfd is not None:
            os.close(self._pidfd)
            self._pidfd = None

    def _exit_status(self) -> int | None:
        raise NotImplementedError


class KernelFork(PidfdProcess):
    """A kernel forked from another kernel: its status is in the file its supervisor writes."""

    def __init__(self, pid: int, status_file: Path) -> None:
        super().__init__(pid)
        self._status_file = status_file

    def _exit_status(self) -> int:
        deadline = time.monotonic() + _STATUS_WAIT
        while True:
            try:
                # An exit status is a few digits; the file is in reach of the kernel's code.
                with self._status_file.open("rb") as file:
                    return int(file.read(_STATUS_BYTES).strip())
            except (OSError, ValueError):
                if time.monotonic() >= deadline:
                    # A supervisor ends without writing only when it is SIGKILLed.
                    return -signal.SIGKILL
                time.sleep(0.01)
