"""CPU time of kernels' process trees, read by the host from /proc.

A tenant's CPU quota is held to what the host measures, not to the usage a
kernel reports in its replies (the kernel runs the code being measured, and
could report anything). One pass over /proc finds every process's parent
and CPU times; a kernel's figure is the sum, over its process and every
process below it, of user and system time plus the time of the children
each has waited for. A child that exits is then counted in its parent's
waited-for time, so the figure only grows while the tree lives; a process
that leaves the tree (a daemon that double-forks out of an uncontained
kernel) stops being counted. A contained kernel's tree is its PID
namespace: nothing in it can leave.
"""

from __future__ import annotations

import os
from collections.abc import Iterable

__all__ = ["tree_cpu_seconds"]

_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def tree_cpu_seconds(roots: Iterable[int]) -> dict[int, float]:
    """CPU seconds of each root's process tree; a root no longer running is left out."""
    wanted = set(roots)
    if not wanted:
        return {}
    parents: dict[int, int] = {}
    ticks: dict[int, int] = {}
    try:
        names = os.listdir("/proc")
    except OSError:
        return {}
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as file:
                stat = file.read()
        except OSError:
            continue  # ended while we looked
        # The name (field 2) may hold spaces and parentheses: the fields after it
        # start after the last ')'.
        fields = stat[stat.rfind(b")") + 2 :].split()
        try:
            pid = int(name)
            parents[pid] = int(fields[1])
            ticks[pid] = sum(int(f) for f in fields[11:15])  # utime stime cutime cstime
        except (IndexError, ValueError):
            continue
    children: dict[int, list[int]] = {}
    for pid, parent in parents.items():
        children.setdefault(parent, []).append(pid)
    found: dict[int, float] = {}
    for root in wanted:
        if root not in ticks:
            continue
        total, stack, seen = 0, [root], set()
        while stack:
            pid = stack.pop()
            if pid in seen:
                continue
            seen.add(pid)
            total += ticks.get(pid, 0)
            stack.extend(children.get(pid, ()))
        found[root] = total / _TICK
    return found
