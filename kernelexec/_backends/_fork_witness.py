"""How the owner learns which process a kernel's fork is: from Linux, never from the kernel.

A kernel answers a fork request with a message its own code can forge: a
cell can replace the handler and name any pid (the owner's, a neighbour's
kernel, init's), and the owner, which ends a failed fork's whole tree, would
then kill what the pid names. So the reply's word is not taken for anything
but "declined" and its hazards. Instead the owner listens on a Unix socket
in the fork's private dir, passes its path in the request, and the forked
child connects to it first thing. The connection carries the child's
identity as Linux saw it: ``SO_PEERPIDFD``, a pidfd of the very process that
connected (``SO_PEERCRED``'s pid, opened as a pidfd, where Linux is older
than 6.5). The owner takes that process only if it is

- below the forking kernel's supervisor, a process the owner started (or
  verified the same way) and watches: so never the owner or its parents,
  pid 1, a zygote, another session's kernel, or anything outside this
  kernel's own tree;
- started at or after the request: so not the kernel itself, nor any
  process the kernel's code had started before;
- still alive after those looks: so the pid looked at was the pidfd's
  process, not a later one that reused the number.

Whatever connects and fails them is ignored. The worst a hostile kernel can
then do is hand over a new process of its own, which the owner ends with
its tree if it does not become a kernel: its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import socket
import struct
import time
from pathlib import Path

from .._kernel.fork import ended
from .._kernel.guard import descendants

__all__ = ["ForkWitness"]

_SO_PEERPIDFD = getattr(socket, "SO_PEERPIDFD", 77)  # Linux 6.5; Python 3.13 names it
_DEPTH = 64  # parent links walked up from a candidate before giving up
_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


class ForkWitness:
    """A listening Unix socket at ``path`` (mode 0600) that recognizes a kernel's fork.

    Args:
        path: where to listen: in a private (0700) dir of the owner's.
        supervisor: the pid of the forking kernel's supervisor.
    """

    def __init__(self, path: Path, supervisor: int) -> None:
        self.path = path
        self.supervisor = supervisor
        self._since = _boot_ticks() - 1  # one tick: the two clocks round differently
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            self._sock.bind(str(path))
            os.chmod(path, 0o600)
            self._sock.listen(8)
            self._sock.setblocking(False)
        except OSError:
            self._sock.close()
            raise

    async def fork(self) -> tuple[int, int]:
        """The first process to connect that passes every check: (pid, pidfd). Waits for it."""
        loop = asyncio.get_running_loop()
        while True:
            conn, _ = await loop.sock_accept(self._sock)
            with conn:
                found = _peer(conn)
            if found is None:
                continue
            pid, pidfd = found
            if self._is_the_fork(pid, pidfd):
                return pid, pidfd
            os.close(pidfd)

    def anything_new(self) -> bool:
        """Whether any process below the supervisor started since the request.

        A kernel that forked has a child the moment it answers; one that says
        it forked with nothing new below it lied, and no fork will connect.
        """
        return any(_started(pid) >= self._since for pid in descendants(self.supervisor))

    def close(self) -> None:
        self._sock.close()
        with contextlib.suppress(OSError):
            self.path.unlink()

    def _is_the_fork(self, pid: int, pidfd: int) -> bool:
        return (
            pid > 1
            and _started(pid) >= self._since
            and _below(pid, self.supervisor)
            and not ended(pidfd)
        )


def _peer(conn: socket.socket) -> tuple[int, int] | None:
    """The connecting process, as Linux recorded it: (pid, pidfd); None if it cannot be had."""
    try:
        pidfd = conn.getsockopt(socket.SOL_SOCKET, _SO_PEERPIDFD)
    except OSError:
        pidfd = -1
    if pidfd >= 0:
        pid = _pid_of(pidfd)
        if pid > 0:
            return pid, pidfd
        os.close(pidfd)
        return None
    try:
        creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
        pid = struct.unpack("3i", creds)[0]
        return pid, os.pidfd_open(pid)
    except (OSError, AttributeError):
        return None


def _pid_of(pidfd: int) -> int:
    """The pid behind a pidfd (its fdinfo's ``Pid:``); -1 if it has ended, 0 if unknown."""
    try:
        with open(f"/proc/self/fdinfo/{pidfd}") as info:
            for line in info:
                if line.startswith("Pid:"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return 0


def _stat(pid: int) -> list[bytes]:
    """``/proc/<pid>/stat``'s fields after the command (field 3 on); [] if gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as file:
            return file.read().rpartition(b")")[2].split()
    except OSError:
        return []


def _started(pid: int) -> float:
    """When ``pid`` started, in clock ticks since boot; -inf if it cannot be read."""
    fields = _stat(pid)
    return int(fields[19]) if len(fields) > 19 else -math.inf


def _below(pid: int, ancestor: int) -> bool:
    for _ in range(_DEPTH):
        fields = _stat(pid)
        if len(fields) < 2:
            return False
        pid = int(fields[1])
        if pid == ancestor:
            return True
        if pid <= 1:
            return False
    return False


def _boot_ticks() -> int:
    # /proc/<pid>/stat's start time counts from boot, in clock ticks.
    return math.floor(time.clock_gettime(time.CLOCK_BOOTTIME) * _TICKS)
