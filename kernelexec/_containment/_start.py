"""One contained kernel's start, on our side: its policy, its private dirs, its cgroups.

``LocalBackend`` calls ``contained_start`` for each start of a contained
kernel (a restart too: the policy is applied afresh). The kernel's own dir
(the private 0700 dir of its connection file and sockets) gets a ``tmp``
folder, the kernel's only writable place besides its work dir: ``TMPDIR``
points there, and so do IPython's, Jupyter's and matplotlib's config dirs and
the XDG cache, config and data dirs, which would otherwise be in a home the
kernel cannot write (or read). Matplotlib's font cache is copied in, so that a
kernel importing pyplot does not spend a second or two rebuilding it.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .._kernel import PRIVATE_TMP
from ._cgroups import KernelCgroups
from ._sandbox import Sandbox, default_memory, gpu_devices

__all__ = ["ContainedStart", "contained_start", "movable_to"]

_SHM_DEFAULT = 1 << 30  # bytes of /dev/shm without a memory limit
# Variables pointed into the private temp dir, and the folder each gets there.
_PRIVATE_DIRS = {
    "TMPDIR": "",
    "TMP": "",
    "TEMP": "",
    "IPYTHONDIR": ".ipython",
    "MPLCONFIGDIR": ".matplotlib",
    "XDG_CACHE_HOME": ".cache",
    "XDG_CONFIG_HOME": ".config",
    "XDG_DATA_HOME": ".local/share",
    "XDG_RUNTIME_DIR": ".run",
    "JUPYTER_CONFIG_DIR": ".jupyter",
    "JUPYTER_DATA_DIR": ".local/share/jupyter",
    "JUPYTER_RUNTIME_DIR": ".local/share/jupyter/runtime",
}


@dataclass
class ContainedStart:
    """What one start of a contained kernel needs.

    Attributes:
        policy: what ``_kernel/contain.py`` applies, as it reads it.
        env: variables for the kernel's environment (its private dirs).
        cgroups: the start's cgroups, removed when the kernel has ended.
    """

    policy: dict[str, Any]
    env: dict[str, str] = field(default_factory=dict)
    cgroups: KernelCgroups = field(default_factory=lambda: KernelCgroups({}))


def contained_start(
    sandbox: Sandbox, *, work_dir: Path, own_dir: Path, movable: Path | None = None
) -> ContainedStart:
    """The policy, environment and cgroups of a kernel about to start in ``work_dir``.

    ``own_dir``: the kernel's private dir (its connection file and sockets),
    new for this start. ``movable``: the folder within which the work dir
    will be renamed (a pool's kernel, to its session's), kept in the kernel's view.
    """
    tmp = own_dir / PRIVATE_TMP
    tmp.mkdir(mode=0o700)
    env = {name: str(tmp / sub) if sub else str(tmp) for name, sub in _PRIVATE_DIRS.items()}
    _copy_font_cache(Path(env["MPLCONFIGDIR"]))
    cgroups = KernelCgroups.make(sandbox.memory, sandbox.processes)
    limits = {
        "open_files": sandbox.open_files,
        "processes": sandbox.processes,
        # Per process, where no cgroup counts the tree's memory together.
        "data": None if cgroups.memory else sandbox.memory,
    }
    policy = {
        "work_dir": str(work_dir),
        "own_dir": str(own_dir),
        "read": list(sandbox.read),
        "write": list(sandbox.write),
        "network": sandbox.network,
        "devices": gpu_devices() if sandbox.gpus else [],
        "movable": [] if movable is None else [str(movable)],
        "limits": limits,
        "cgroups": cgroups.paths(),
        "shm_bytes": sandbox.memory or default_memory() or _SHM_DEFAULT,
    }
    return ContainedStart(policy, env, cgroups)


def _copy_font_cache(target: Path) -> None:
    """Matplotlib's font list, from this user's cache into the kernel's own (if there is one)."""
    cache = os.environ.get("MPLCONFIGDIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "matplotlib"
    )
    with contextlib.suppress(OSError):
        found = [e for e in os.scandir(cache) if e.name.startswith("fontlist-") and e.is_file()]
        if found:
            target.mkdir(mode=0o700)
            for entry in found:
                shutil.copyfile(entry.path, target / entry.name)


def movable_to(work_dir: Path, movable: Path) -> bool:
    """Whether a contained kernel kept ``movable`` in view can take ``work_dir``.

    Only a folder strictly below ``movable`` (links resolved): its work dir is
    renamed there, and the kernel sees nothing outside ``movable``.
    """
    real, root = os.path.realpath(work_dir), os.path.realpath(movable)
    return real.startswith(root.rstrip("/") + "/")
