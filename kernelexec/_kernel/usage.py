"""What one execution cost the kernel: CPU time, peak memory, wall time.

Loaded by ``boot.py`` inside the kernel process (standard library and
ipykernel only). ``install`` measures every ``execute_request`` from ipykernel's
``init_metadata`` (just before the code runs) to its ``finish_metadata`` (just
before the reply is sent) and puts the figures in the reply's
``metadata["kernelexec_usage"]`` (a key of its own: ``caps.py`` replaces
``metadata["kernelexec"]`` when it cuts a reply). kernelexec's reducer reads
them into ``ExecutionResult.usage``.

- CPU: ``getrusage`` deltas of the kernel (all its threads) and of its children
  (``RUSAGE_CHILDREN``: the processes it has waited for, e.g. through
  ``subprocess.run``; a child still running, or never waited for, is not in it).
- Peak memory: Linux keeps a process's peak RSS (``VmHWM``) and resets it to
  the current RSS when "5" is written to ``/proc/self/clear_refs``; it is reset
  at the start of each execution and read at its end. A non-dumpable process
  (``guard.py`` makes a kernel one) may write its own ``clear_refs`` only as
  root, and making it dumpable for a moment would let any process of its user
  attach to it. Elsewhere the peak is exact when the execution raised the
  kernel's lifetime peak (``ru_maxrss``); otherwise a thread samples the RSS
  every ``SAMPLE_EVERY`` seconds while code runs, and the highest sample is
  the peak (a spike shorter than that may be missed).
- Children's peak RSS cannot be reset: ``RUSAGE_CHILDREN``'s ``ru_maxrss`` is
  the largest peak of any child waited for since the kernel started.

It costs about 30 microseconds per execution (where the peak is sampled, a
thread's wake-up every ``SAMPLE_EVERY`` seconds while code runs besides).
"""

from __future__ import annotations

import contextlib
import os
import resource
import sys
import threading
import time
from typing import Any

KEY = "kernelexec_usage"
_OPEN_LIMIT = 64  # executions measured at once (subshells); a leak bound, not a real limit
# ru_maxrss is in kilobytes on Linux, in bytes on macOS.
_MAXRSS_UNIT = 1 if sys.platform == "darwin" else 1024
SAMPLE_EVERY = 0.005  # seconds between RSS samples where the peak cannot be reset
_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


class _Start:
    __slots__ = ("children", "maxrss", "reset", "self_", "wall")

    def __init__(self) -> None:
        self.wall = time.monotonic()
        self.self_ = resource.getrusage(resource.RUSAGE_SELF)
        self.children = resource.getrusage(resource.RUSAGE_CHILDREN)
        self.maxrss = self.self_.ru_maxrss * _MAXRSS_UNIT
        self.reset = _reset_peak()


class _Sampler:
    """The highest RSS of this process over each open window, sampled by a thread.

    For kernels that cannot reset their peak. The thread sleeps on an event
    while no execution runs. It is started on first use, so a zygote (which
    must stay single-threaded) never has it, and again in a forked kernel
    (a fork keeps only the thread that forked).
    """

    def __init__(self) -> None:
        self._highest: dict[str, int] = {}  # window -> highest RSS seen in it
        self._lock = threading.Lock()
        self._running = threading.Event()
        self._thread: threading.Thread | None = None
        self._pid = 0

    def open(self, window: str) -> None:
        if self._thread is None or self._pid != os.getpid() or not self._thread.is_alive():
            self._lock = threading.Lock()  # one a forked parent's thread held is not ours
            self._running = threading.Event()
            self._pid = os.getpid()
            self._thread = threading.Thread(
                target=self._sample, name="kernelexec-usage", daemon=True
            )
            self._thread.start()
        rss = _rss()
        with self._lock:
            self._highest[window] = rss
            self._running.set()

    def close(self, window: str) -> int | None:
        rss = _rss()
        with self._lock:
            highest = self._highest.pop(window, None)
            if not self._highest:
                self._running.clear()
        if highest is None:
            return None
        return max(highest, rss) or None  # 0: RSS cannot be read here

    def _sample(self) -> None:
        running, lock, highest = self._running, self._lock, self._highest
        while True:
            running.wait()
            rss = _rss()
            with lock:
                for window, seen in highest.items():
                    if rss > seen:
                        highest[window] = rss
            time.sleep(SAMPLE_EVERY)


class Meter:
    """Measures executions, each from ``start(msg_id)`` to ``finish(msg_id)``."""

    def __init__(self) -> None:
        self._open: dict[str, _Start] = {}
        self._sampler = _Sampler()

    def start(self, msg_id: str) -> None:
        if len(self._open) >= _OPEN_LIMIT:
            for stale in self._open:  # starts whose finish never came
                self._sampler.close(stale)
            self._open.clear()
        start = self._open[msg_id] = _Start()
        if not start.reset:
            self._sampler.open(msg_id)

    def finish(self, msg_id: str) -> dict[str, Any] | None:
        """The execution's usage, as the reply's metadata carries it; None if never started."""
        start = self._open.pop(msg_id, None)
        if start is None:
            return None
        wall = time.monotonic() - start.wall
        own = resource.getrusage(resource.RUSAGE_SELF)
        children = resource.getrusage(resource.RUSAGE_CHILDREN)
        maxrss = own.ru_maxrss * _MAXRSS_UNIT
        sampled = None if start.reset else self._sampler.close(msg_id)
        peak: int | None = None
        if start.reset:
            peak = _vm_hwm()
        if peak is None and maxrss > start.maxrss:
            peak = maxrss  # a new lifetime peak was reached during this execution: exact
        if peak is None:
            peak = sampled
        child_user = children.ru_utime - start.children.ru_utime
        child_system = children.ru_stime - start.children.ru_stime
        return {
            "wall_seconds": wall,
            "user_seconds": own.ru_utime - start.self_.ru_utime + child_user,
            "system_seconds": own.ru_stime - start.self_.ru_stime + child_system,
            "peak_rss_bytes": peak,
            "children_user_seconds": child_user,
            "children_system_seconds": child_system,
            "children_max_rss_bytes": children.ru_maxrss * _MAXRSS_UNIT,
        }


class _OwnFile:
    """A file of ``/proc/self`` kept open: opening one costs more than using it.

    Opened again in a forked kernel, whose inherited descriptor is its parent's
    file; an open that failed is not retried in the same process.
    """

    def __init__(self, name: str, flags: int) -> None:
        self._path = f"/proc/self/{name}"
        self._flags = flags
        self._pid = 0
        self._fd: int | None = None

    def fd(self) -> int | None:
        if self._pid != os.getpid():
            if self._fd is not None:
                with contextlib.suppress(OSError):
                    os.close(self._fd)
            self._pid = os.getpid()
            try:
                self._fd = os.open(self._path, self._flags | os.O_CLOEXEC)
            except OSError:
                self._fd = None  # not Linux, or clear_refs of a non-root, non-dumpable kernel
        return self._fd


_CLEAR_REFS = _OwnFile("clear_refs", os.O_WRONLY)
_STATUS = _OwnFile("status", os.O_RDONLY)
_STATM = _OwnFile("statm", os.O_RDONLY)


def _reset_peak() -> bool:
    fd = _CLEAR_REFS.fd()
    if fd is None:
        return False
    try:
        os.write(fd, b"5")  # 5: reset the peak RSS to the current RSS
    except OSError:
        return False
    return True


def _read(file: _OwnFile) -> bytes:
    fd = file.fd()
    if fd is None:
        return b""
    try:
        return os.pread(fd, 4096, 0)  # a /proc file is made afresh for each read from 0
    except OSError:
        return b""


def _rss() -> int:
    """This process's resident memory now, in bytes (0 where it cannot be read)."""
    with contextlib.suppress(ValueError, IndexError):
        return int(_read(_STATM).split()[1]) * _PAGE
    return 0


def _vm_hwm() -> int | None:
    _, found, rest = _read(_STATUS).partition(b"\nVmHWM:")
    if not found:
        return None
    with contextlib.suppress(ValueError, IndexError):
        return int(rest.split()[0]) * 1024  # in kB
    return None


def install(kernel: Any) -> Meter:
    """Makes ``kernel`` (ipykernel's) report each execution's usage in its execute_reply."""
    meter = Meter()
    init_metadata, finish_metadata = kernel.init_metadata, kernel.finish_metadata

    def measured_init(parent: dict[str, Any]) -> Any:
        metadata = init_metadata(parent)
        with contextlib.suppress(Exception):  # never cost an execution its reply
            if parent["header"]["msg_type"] == "execute_request":
                meter.start(parent["header"]["msg_id"])
        return metadata

    def measured_finish(parent: dict[str, Any], metadata: Any, reply_content: Any) -> Any:
        metadata = finish_metadata(parent, metadata, reply_content)
        with contextlib.suppress(Exception):
            usage = meter.finish(parent["header"]["msg_id"])
            if usage is not None and isinstance(metadata, dict):
                metadata[KEY] = usage
        return metadata

    kernel.init_metadata = measured_init
    kernel.finish_metadata = measured_finish
    return meter
