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
  root: elsewhere the peak is known only when the execution raised the
  kernel's lifetime peak (``ru_maxrss``), and is None otherwise.
- Children's peak RSS cannot be reset: ``RUSAGE_CHILDREN``'s ``ru_maxrss`` is
  the largest peak of any child waited for since the kernel started.

It costs about 30 microseconds per execution.
"""

from __future__ import annotations

import contextlib
import resource
import sys
import time
from typing import Any

KEY = "kernelexec_usage"
_OPEN_LIMIT = 64  # executions measured at once (subshells); a leak bound, not a real limit
# ru_maxrss is in kilobytes on Linux, in bytes on macOS.
_MAXRSS_UNIT = 1 if sys.platform == "darwin" else 1024


class _Start:
    __slots__ = ("children", "maxrss", "reset", "self_", "wall")

    def __init__(self) -> None:
        self.wall = time.monotonic()
        self.self_ = resource.getrusage(resource.RUSAGE_SELF)
        self.children = resource.getrusage(resource.RUSAGE_CHILDREN)
        self.maxrss = self.self_.ru_maxrss * _MAXRSS_UNIT
        self.reset = _reset_peak()


class Meter:
    """Measures executions, each from ``start(msg_id)`` to ``finish(msg_id)``."""

    def __init__(self) -> None:
        self._open: dict[str, _Start] = {}

    def start(self, msg_id: str) -> None:
        if len(self._open) >= _OPEN_LIMIT:
            self._open.clear()  # starts whose finish never came
        self._open[msg_id] = _Start()

    def finish(self, msg_id: str) -> dict[str, Any] | None:
        """The execution's usage, as the reply's metadata carries it; None if never started."""
        start = self._open.pop(msg_id, None)
        if start is None:
            return None
        wall = time.monotonic() - start.wall
        own = resource.getrusage(resource.RUSAGE_SELF)
        children = resource.getrusage(resource.RUSAGE_CHILDREN)
        maxrss = own.ru_maxrss * _MAXRSS_UNIT
        peak: int | None = None
        if start.reset:
            peak = _vm_hwm()
        if peak is None and maxrss > start.maxrss:
            peak = maxrss  # a new lifetime peak was reached during this execution
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


def _reset_peak() -> bool:
    try:
        with open("/proc/self/clear_refs", "w") as file:
            file.write("5")
    except OSError:
        return False  # not Linux, or a non-dumpable kernel that is not root
    return True


def _vm_hwm() -> int | None:
    try:
        with open("/proc/self/status", "rb") as file:
            status = file.read()
    except OSError:
        return None
    _, found, rest = status.partition(b"\nVmHWM:")
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
