"""A contained kernel's memory and processes counted together: a cgroup per kernel start.

Where this process may make cgroups (cgroup v1's ``memory`` and ``pids``
controllers, writable by root), each contained kernel gets one of each,
below this process's own (so an outer limit still holds): the supervisor joins
them before it forks, so the kernel and everything it starts count together,
and the whole tree is held to ``memory`` (Linux's OOM killer ends a process
of the tree, the kernel first, when it is passed) and ``processes``. They are
removed once the tree has ended. Where it may not (not root; cgroup v2, whose
delegation this does not do yet), the kernel falls back on rlimits, per
process: ``RLIMIT_DATA`` for memory, and ``RLIMIT_NPROC``, which Linux counts
per user namespace, so per kernel. Linux exempts root's processes from
``RLIMIT_NPROC``: a root kernel's processes are held only by the ``pids``
cgroup, so as root on a machine with cgroup v2 alone they are not held yet.
"""

from __future__ import annotations

import atexit
import contextlib
import itertools
import os
import threading
import time
from pathlib import Path

__all__ = ["KernelCgroups"]

_ROOT = Path("/sys/fs/cgroup")
_COUNTER = itertools.count(1)
_REMOVE_WITHIN = 2.0  # seconds: the tree's processes leave the cgroup as they are reaped


class KernelCgroups:
    """The ``memory`` and ``pids`` cgroups of one kernel start (either may be missing)."""

    def __init__(self, folders: dict[str, Path]) -> None:
        self.folders = folders

    @classmethod
    def make(cls, memory: int | None, processes: int | None) -> KernelCgroups:
        """New cgroups holding these limits; none where they cannot be made."""
        _sweep_once()
        made: dict[str, Path] = {}
        name = f"kernelexec-{os.getpid()}-{next(_COUNTER)}"
        for controller, limits in (
            ("memory", {"memory.limit_in_bytes": memory}),
            ("pids", {"pids.max": processes}),
        ):
            wanted = {k: v for k, v in limits.items() if v is not None}
            parent = _own(controller)
            if not wanted or parent is None:
                continue
            folder = parent / name
            try:
                folder.mkdir()
            except OSError:
                continue  # not ours to make: rlimits instead
            try:
                for key, value in wanted.items():
                    (folder / key).write_text(str(value))
            except OSError:
                with contextlib.suppress(OSError):
                    folder.rmdir()
                continue
            made[controller] = folder
        if made:
            _hasten_joins()
        return cls(made)

    @property
    def memory(self) -> bool:
        return "memory" in self.folders

    def paths(self) -> list[str]:
        """The folders the supervisor joins (writes itself into ``cgroup.procs``)."""
        return [str(p) for p in self.folders.values()]

    def out_of_memory(self) -> bool:
        """Whether Linux's OOM killer ended a process of the tree for passing the limit."""
        folder = self.folders.get("memory")
        if folder is None:
            return False
        with contextlib.suppress(OSError, ValueError):
            for line in (folder / "memory.oom_control").read_text().splitlines():
                name, _, value = line.partition(" ")
                if name == "oom_kill":
                    return int(value) > 0
        return False

    def remove_when_empty(self) -> None:
        """Removes the cgroups now, or from a thread once their last processes are reaped."""
        busy = {}
        for controller, folder in self.folders.items():
            try:
                folder.rmdir()
            except FileNotFoundError:
                pass
            except OSError:
                busy[controller] = folder
        self.folders = busy
        if busy:
            _PENDING.add(self)
            threading.Thread(target=self.remove, name="kernelexec-cgroups", daemon=True).start()

    def remove(self, within: float = _REMOVE_WITHIN) -> None:
        """Removes the cgroups, once their processes are gone (within a moment)."""
        deadline = time.monotonic() + within
        for folder in list(self.folders.values()):
            while True:
                try:
                    folder.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    if time.monotonic() > deadline:
                        break  # still busy: kernelexec cleanup removes it later
                    time.sleep(0.02)
        self.folders = {}
        _PENDING.discard(self)


_PENDING: set[KernelCgroups] = set()  # cgroups whose last processes were still there
_SWEPT = False


@atexit.register
def _remove_pending() -> None:
    # The daemon threads that wait on them end with this process.
    for cgroups in list(_PENDING):
        cgroups.remove(within=0.5)


def _sweep_once() -> None:
    """Removes the empty cgroups an earlier kernelexec process of this machine left.

    Only ``kernelexec-<pid>-<n>`` folders of a process that is gone, and only
    when empty (``rmdir`` of a cgroup with a process in it fails): a process
    killed before its clean-up leaves them behind.
    """
    global _SWEPT
    if _SWEPT:
        return
    _SWEPT = True
    for controller in ("memory", "pids"):
        parent = _own(controller)
        if parent is None:
            continue
        with contextlib.suppress(OSError):
            for entry in os.scandir(parent):
                owner = entry.name.split("-")[1:2]
                if (
                    entry.name.startswith("kernelexec-")
                    and owner
                    and owner[0].isdigit()
                    and not os.path.exists(f"/proc/{owner[0]}")
                ):
                    with contextlib.suppress(OSError):
                        os.rmdir(entry.path)


def _hasten_joins() -> None:
    """Moves a thread of this process into the cgroup it is already in: nothing moves.

    Every move into a cgroup takes a lock of Linux's (``cgroup_threadgroup_rwsem``,
    one for every hierarchy) that first waits for an RCU grace period, unless
    another move ended less than a grace period before (cgroup v1 mounted without
    ``favordynmods``): 9 to 12 ms on this machine, the longest wait of a
    contained kernel's start. The kernel's supervisor joins its new cgroups some
    10 to 15 ms after they are made; this move, made meanwhile and off the
    start's path, leaves the lock ready for it (measured: that step 0.3 ms
    instead of 8.8 to 12, ``docs/design.md``). The thread moves itself alone
    (its id to ``tasks``, which takes the same lock), into its own cgroup, so
    no other thread of this process is touched. A move fails harmlessly.
    """
    threading.Thread(target=_move_into_own, name="kernelexec-cgroups-lock", daemon=True).start()


def _move_into_own() -> None:
    folder = _own("memory", "thread-self") or _own("pids", "thread-self")
    if folder is not None:
        with contextlib.suppress(OSError):
            (folder / "tasks").write_text(str(threading.get_native_id()))


def _own(controller: str, of: str = "self") -> Path | None:
    """This process's (``of="thread-self"``: this thread's) cgroup folder of a cgroup v1
    ``controller``; None without one."""
    try:
        lines = Path(f"/proc/{of}/cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if controller in controllers.split(","):
            folder = _ROOT / controller / path.lstrip("/")
            return folder if folder.is_dir() else None
    return None
