"""Kernels this process did not start itself, seen from their owner: ``poll()`` and ``pid``.

Its parent is the kernel it was forked from, not this process, so it cannot
be waited for here: its liveness comes from a pidfd (not fooled by a reused
pid), and its exit status from the file its supervisor writes as it ends
(``guard.protect(status_file=...)``).
"""

from __future__ import annotations

import contextlib
import os
import signal
import stat
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .._kernel.fork import ended

__all__ = ["ForkHazard", "KernelFork", "PidfdProcess", "ProcessFork"]

_STATUS_WAIT = 1.0  # seconds an ended fork's supervisor gets to have written its status
_MOST_HAZARDS = 10
_HAZARD_TEXT = 400  # characters


class PidfdProcess:
    """A process this one did not start: ``poll()``, ``pid`` and ``returncode`` as a ``Popen``'s.

    Its liveness comes from a pidfd, which a reused pid cannot fool; how its
    exit status is learnt is the subclass's (``_exit_status``).
    """

    def __init__(self, pid: int, pidfd: int | None = None) -> None:
        self.pid = pid
        self.returncode: int | None = None
        self._pidfd: int | None = os.pidfd_open(pid) if pidfd is None else pidfd

    def poll(self) -> int | None:
        if self.returncode is not None:
            return self.returncode
        if self._pidfd is None or not ended(self._pidfd):
            return None
        self.returncode = self._exit_status()
        return self.returncode

    def kill(self) -> None:
        """SIGKILL, through the pidfd: never another process that took the pid since."""
        if self._pidfd is not None and self.poll() is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                signal.pidfd_send_signal(self._pidfd, signal.SIGKILL)

    def release(self) -> None:
        """Done with the (ended) process: its pidfd is closed."""
        if self._pidfd is not None:
            os.close(self._pidfd)
            self._pidfd = None

    def _exit_status(self) -> int | None:
        raise NotImplementedError


class KernelFork(PidfdProcess):
    """A kernel forked from another kernel: its status is in the file its supervisor writes.

    The file is in a dir the kernel's code can write to: it is read without
    following a link, without waiting on a pipe, and a few bytes at most.
    """

    def __init__(self, pid: int, status_file: Path, pidfd: int | None = None) -> None:
        super().__init__(pid, pidfd)
        self._status_file = status_file

    def _exit_status(self) -> int:
        deadline = time.monotonic() + _STATUS_WAIT
        while True:
            try:
                return int(_read_small(self._status_file))
            except (OSError, ValueError):
                if time.monotonic() >= deadline:
                    # A supervisor ends without writing only when it is SIGKILLed.
                    return -signal.SIGKILL
                time.sleep(0.01)


def _read_small(path: Path) -> str:
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise ValueError(f"{path} is not a file")
        return os.read(fd, 32).decode("ascii", "replace").strip()
    finally:
        os.close(fd)


@dataclass(frozen=True)
class ForkHazard:
    """Something in a kernel that does not survive ``fork()`` (``_kernel/hazards.py``).

    Attributes:
        kind: "cuda", "openmp", "threads", "children" or "sockets".
        blocks: the copy would be broken or could hang.
        text: what it is, for a person.
    """

    kind: str
    blocks: bool
    text: str

    @classmethod
    def listed(cls, found: Any) -> tuple[ForkHazard, ...]:
        """The hazards in a kernel's reply, held to types and sizes (its code wrote them)."""
        if not isinstance(found, list):
            return ()
        hazards = []
        for item in found[:_MOST_HAZARDS]:
            if isinstance(item, dict) and isinstance(item.get("text"), str):
                hazards.append(
                    cls(
                        kind=str(item.get("kind"))[:20],
                        blocks=item.get("blocks") is True,
                        text=item["text"][:_HAZARD_TEXT],
                    )
                )
        return tuple(hazards)


@dataclass(frozen=True)
class ProcessFork:
    """What ``LocalBackend.fork`` made: ``backend`` is None if a hazard declined the fork."""

    backend: Any  # LocalBackend | None (it imports this module)
    hazards: tuple[ForkHazard, ...]
