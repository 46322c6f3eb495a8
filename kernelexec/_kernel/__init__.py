"""Code that runs inside the kernel's own process, not in kernelexec's.

``boot.py`` is run by path with whatever Python hosts the kernel (a venv's, a
container's), which may not have kernelexec installed: these modules import
only the standard library and ipykernel, and ``boot.py`` loads its siblings by
path. Nothing here is imported by the rest of kernelexec except for the paths
and constants below, ``caps.py``'s byte caps, which the reducer applies to
kernels it did not boot, ``guard.py``'s process-tree and privilege calls,
``fork.py``'s message names and liveness check, ``data.py``'s mimetypes
and caps, which the host holds every table and chart to, and ``call_tool.py``'s
function, whose source the Agent Framework integration sends as a cell. ``contain.py``
(which contains the kernel) is run as a script by the host's probe of what
this machine can do.
"""

from __future__ import annotations

from pathlib import Path

__all__ = [
    "BOOT_DIR",
    "BOOT_SCRIPT",
    "CANNOT_CONTAIN",
    "CONTAIN_SCRIPT",
    "MASKED",
    "NO_IPYKERNEL",
    "PRIVATE_TMP",
    "SANDBOX_VARIABLE",
    "ZYGOTE_SCRIPT",
]

BOOT_DIR = Path(__file__).resolve().parent
BOOT_SCRIPT = BOOT_DIR / "boot.py"
ZYGOTE_SCRIPT = BOOT_DIR / "zygote.py"
CONTAIN_SCRIPT = BOOT_DIR / "contain.py"
NO_IPYKERNEL = 97  # exit status kernelexec reads as "install ipykernel"; boot.py's too
CANNOT_CONTAIN = 96  # a kernel that could not be contained; contain.py's too
SANDBOX_VARIABLE = "KERNELEXEC_SANDBOX"  # a spawned kernel's policy; boot.py's too
PRIVATE_TMP = "tmp"  # a contained kernel's temp dir, in its sockets' dir; guard.py's too
# Folders a contained kernel does not see (and its home); contain.py's too.
MASKED = ("/run", "/tmp", "/var", "/home", "/root", "/mnt", "/media", "/srv", "/opt")
