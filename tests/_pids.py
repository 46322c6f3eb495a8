"""Pids as this machine sees them, for kernels that may be contained.

A contained kernel is pid 2 of a PID namespace of its own (its init is 1), and
the pids its code prints are that namespace's: a test that signals, waits on
or compares processes turns them into this machine's first.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path
from typing import Any

__all__ = [
    "CONTAINED_KERNEL_PID",
    "contained_kernel",
    "default_fork_method",
    "end_netns",
    "host_pid",
    "kernel_pid",
    "netns_members",
]

CONTAINED_KERNEL_PID = 2


def _spaces(pid: str) -> list[str]:
    """The process's pid in each PID namespace from this one down (``NSpid``)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("NSpid:"):
            return line.split()[1:]
    return []


def contained_kernel(work_dir: Path) -> int | None:
    """This machine's pid of the contained kernel running in ``work_dir``; None: none is.

    Found as the process that is pid 2 of a PID namespace one below this one
    and whose current folder is ``work_dir``.
    """
    wanted = str(Path(work_dir).resolve())
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            spaces = _spaces(entry)
            if (
                spaces[1:] == [str(CONTAINED_KERNEL_PID)]
                and os.readlink(f"/proc/{entry}/cwd") == wanted
            ):
                return int(entry)
        except OSError:
            continue
    return None


def host_pid(pid: int, work_dir: Path) -> int:
    """This machine's pid of the process the kernel in ``work_dir`` sees as ``pid``.

    ``pid`` itself where that kernel is not contained. Ask while the process runs.
    """
    kernel = contained_kernel(work_dir)
    if kernel is None:
        return pid
    space = os.readlink(f"/proc/{kernel}/ns/pid")
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            if _spaces(entry)[1:] == [str(pid)] and os.readlink(f"/proc/{entry}/ns/pid") == space:
                return int(entry)
        except OSError:
            continue
    raise LookupError(f"no process {pid} in the namespace of the kernel in {work_dir}")


def _text(result: Any) -> str:
    return str(getattr(result, "stdout", "") or getattr(result, "text", "")).strip()


async def kernel_pid(session: Any) -> int:
    """This machine's pid of an ``AsyncSession``'s kernel (one execution)."""
    seen = int(_text(await session.execute("import os; print(os.getpid())")))
    return host_pid(seen, session.work_dir)


def default_fork_method() -> str:
    """How ``fork()`` copies a kernel of the default policy here, now.

    A contained kernel is checkpointed and restored (a process copy would keep
    its parent's file access); an uncontained one is forked as a process.
    """
    from kernelexec._containment._platform import choose

    return "process" if choose(None) is None else "checkpoint"


def netns_members(namespace: os.stat_result, exclude: tuple[int, ...]) -> dict[int, str]:
    """The processes in network ``namespace`` now, but ``exclude``: pid to command line."""
    found = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) in exclude:
            continue
        try:
            here = os.stat(f"/proc/{entry}/ns/net")
            if (here.st_dev, here.st_ino) != (namespace.st_dev, namespace.st_ino):
                continue
            with open(f"/proc/{entry}/cmdline", "rb") as handle:
                found[int(entry)] = handle.read(300).replace(b"\0", b" ").decode("utf-8", "replace")
        except OSError:
            continue  # ended meanwhile
    return found


def end_netns(namespace: os.stat_result, exclude: tuple[int, ...], grace: float) -> list[str]:
    """Waits ``grace`` s for the network namespace to empty, kills what is left; those killed.

    Every pid signalled was in the namespace when looked at, and the namespace
    is held open, so the pid is one this run made (or a zombie of one, which
    a signal does nothing to).
    """
    deadline = time.monotonic() + grace
    while (left := netns_members(namespace, exclude)) and time.monotonic() < deadline:
        time.sleep(0.2)
    killed = []
    for pid, command in left.items():
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
            killed.append(f"{pid}: {command.strip()}")
    return killed
