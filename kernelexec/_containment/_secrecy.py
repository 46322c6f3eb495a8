"""Keeping this process's secrets from the kernels it starts.

``kernel_env()`` keeps credentials out of a kernel's environment; this keeps a
kernel from reading them out of this process, where its code could otherwise
find them in ``/proc/<pid>/environ``, ``mem`` and ``cmdline``:

- the process is made non-dumpable (``PR_SET_DUMPABLE`` 0): its ``environ``,
  ``mem``, ``fd`` and the like then need CAP_SYS_PTRACE, even for a process of
  the same uid, and a root kernel drops that capability at boot (see
  ``_kernel/guard.py``). The side effects: no core dumps, and gdb or py-spy
  on this process need root. ``KERNELEXEC_DUMPABLE=1`` opts out (kernels can
  then read this process's environment and memory).
- the values of credential-like options (``--token X``, ``--api-key=X``, the
  names ``kernel_env()`` withholds) are overwritten with ``*`` in the
  process's own argument memory, which is what ``/proc/<pid>/cmdline`` shows:
  that file is world-readable, dumpable or not.

Overwriting rather than re-executing with the token moved into the
environment: both leave the value readable between exec and the first line of
kernelexec's code (no kernel of ours runs yet then); overwriting leaves
nothing behind, whereas a re-exec parks the token in the environment, relies
on reconstructing how Python was invoked (``-m``, ``-c``, entry-point scripts,
interpreter options), costs a second interpreter start-up, and cannot help a
library user's own program. The memory written is the one Linux reports for
this process and is checked against ``/proc/self/cmdline`` first.

The arguments are starred out when kernelexec is imported (this module is
the package's first import, so ``kernelexec serve --token X`` shows the token
only while Python starts, not for the seconds a loaded machine takes to import
the rest); the library turns non-dumpable when it starts its first kernel,
``kernelexec``'s commands as they start.
"""

from __future__ import annotations

import ctypes
import sys

from .._environment import keep_dumpable, looks_secret
from .._kernel import guard

__all__ = ["drop_capabilities", "protect_process"]

_ARG_START_FIELD = 45  # /proc/<pid>/stat fields 48 and 49 (arg_start, arg_end), after the name
_protected = False


def protect_process() -> None:
    """Makes this process unreadable to the kernels it starts; cheap after the first call."""
    global _protected
    if _protected or not sys.platform.startswith("linux"):
        return
    _protected = True
    if not keep_dumpable():
        guard.set_undumpable()
    _hide_secret_arguments()


def drop_capabilities() -> None:
    """Drops, as a root kernel does, what reads a non-dumpable process anyway.

    For kernelexec's own commands, which need none of these capabilities: the
    kernels they start from other kernelspecs (a gateway's stock ipykernel, a
    server's other kernels) inherit the smaller bounding set. Call it before
    any thread starts.
    """
    guard.drop_capabilities()


def hidden_arguments(raw: bytes) -> bytes:
    """``raw`` (NUL-separated arguments) with credential-like option values starred out.

    Same length, so it fits where the original was.
    """
    args = raw.split(b"\0")
    hide_next = False
    for index in range(1, len(args)):  # args[0] is the program
        arg = args[index]
        if hide_next:
            args[index] = b"*" * len(arg)
            hide_next = False
        elif arg.startswith(b"-") and arg.strip(b"-"):
            name, equals, value = arg.partition(b"=")
            if looks_secret(name.strip(b"-").decode("utf-8", "replace").replace("-", "_")):
                if equals:
                    args[index] = name + equals + b"*" * len(value)
                else:
                    hide_next = True
    return b"\0".join(args)


def _hide_secret_arguments() -> None:
    try:
        with open("/proc/self/stat", "rb") as file:
            fields = file.read().rsplit(b")", 1)[1].split()
        start, end = int(fields[_ARG_START_FIELD]), int(fields[_ARG_START_FIELD + 1])
        with open("/proc/self/cmdline", "rb") as file:
            shown = file.read()
    except (OSError, IndexError, ValueError):
        return
    # Written only where Linux says the arguments are and they read as
    # /proc/self/cmdline shows them: anything else is not a layout we know.
    if not 0 < start < end or ctypes.string_at(start, end - start) != shown:
        return
    hidden = hidden_arguments(shown)
    if hidden != shown:
        ctypes.memmove(start, hidden, len(hidden))


if sys.platform.startswith("linux"):
    _hide_secret_arguments()
