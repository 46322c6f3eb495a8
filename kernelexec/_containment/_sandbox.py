"""``Sandbox``: what a contained local kernel may reach, and how it is asked for.

The policy is a small frozen value; ``_kernel/contain.py`` applies it inside
the kernel's own process before any code runs (namespaces, Landlock,
seccomp, limits). ``choose`` turns what a caller passed as ``sandbox=``
(None, True, False or a ``Sandbox``) into the policy in force, given what
this machine can do (``_platform.py``); ``kernel_policy`` makes what one
kernel's start sends to it.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "DEFAULT_OPEN_FILES",
    "DEFAULT_PROCESSES",
    "Sandbox",
    "default_memory",
    "gpu_devices",
]

DEFAULT_PROCESSES = 1024  # processes and threads of the session's kernel together
DEFAULT_OPEN_FILES = 4096  # per process
MIN_MEMORY = 64 << 20  # a kernel does not start in less
_MIN_PROCESSES = 16  # the kernel's own threads and its namespace's init


def default_memory() -> int | None:
    """Half of this machine's memory, in bytes (None where it cannot be read)."""
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") // 2
    except (ValueError, OSError, AttributeError):
        return None


class _Default:
    """The ``memory`` a caller left out: half this machine's, found when the policy is made."""


_DEFAULT = _Default()


@dataclass(frozen=True, init=False)
class Sandbox:
    """What a contained local kernel may reach: files, network, memory, processes.

    A contained kernel reads what its interpreter and the system need (the
    Python install, the venv, ``/usr``, the files of ``/etc`` programs read),
    reads and writes its work dir and a private temp dir (``TMPDIR``; IPython,
    matplotlib and the XDG cache and config dirs point there), sees only its
    own processes and, without ``network``, only its own loopback. Nothing
    else: not ``$HOME``, other sessions' work dirs, the server's checkpoints.
    A denied action is the operating system's error in the cell
    (``PermissionError``, ``Network is unreachable``).

    Attributes:
        read: more paths the kernel may read (a data folder), beneath each.
        write: more paths it may also write.
        network: reach other machines and this one's services; without it the
            kernel has a network of its own, with only a loopback interface.
        memory: bytes for the session's kernel and its processes together,
            where Linux lets kernelexec make a cgroup (root); elsewhere each
            process's data size. None: no limit. Default: half this machine's.
        processes: processes and threads of the kernel together (a fork bomb
            stops there). None: no limit.
        open_files: open files per process. None: this process's limit.
        gpus: use this machine's GPUs (NVIDIA's ``/dev/nvidia*``, AMD's
            ``/dev/kfd`` and ``/dev/dri/renderD*``). Without it a contained
            kernel has no GPU: torch's ``cuda.is_available()`` says False.
    """

    read: tuple[str, ...]
    write: tuple[str, ...]
    network: bool
    memory: int | None
    processes: int | None
    open_files: int | None
    gpus: bool

    def __init__(
        self,
        *,
        read: Iterable[str | os.PathLike[str]] = (),
        write: Iterable[str | os.PathLike[str]] = (),
        network: bool = False,
        memory: int | _Default | None = _DEFAULT,
        processes: int | None = DEFAULT_PROCESSES,
        open_files: int | None = DEFAULT_OPEN_FILES,
        gpus: bool = False,
    ) -> None:
        # Written out (not the dataclass's): read and write take any paths and
        # are kept as absolute strings, and the memory default is this machine's.
        chosen = default_memory() if isinstance(memory, _Default) else memory
        for name, value in (
            ("read", _paths("read", read)),
            ("write", _paths("write", write)),
            ("network", network),
            ("memory", chosen),
            ("processes", processes),
            ("open_files", open_files),
            ("gpus", gpus),
        ):
            object.__setattr__(self, name, value)
        for name in ("network", "gpus"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"Sandbox.{name} is True or False, not {getattr(self, name)!r}")
        for name, least in (
            ("memory", MIN_MEMORY),
            ("processes", _MIN_PROCESSES),
            ("open_files", 64),
        ):
            value = getattr(self, name)
            if value is not None and (
                isinstance(value, bool) or not isinstance(value, int) or value < least
            ):
                raise ValueError(f"Sandbox.{name} must be None or a whole number from {least:,}")

    def to_dict(self) -> dict[str, Any]:
        """The policy as JSON-ready data (what ``GET /sessions/{id}`` and transcripts show)."""
        data = asdict(self)
        data["read"], data["write"] = list(self.read), list(self.write)
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Sandbox:
        """The policy ``to_dict`` gave (keys left out take their defaults)."""
        return cls(**data)


def gpu_devices(dev: str = "/dev") -> list[str]:
    """This machine's GPU device nodes (and NVIDIA's capability folder), as a kernel opens them."""
    found: list[str] = []
    with contextlib.suppress(OSError):
        for entry in sorted(os.scandir(dev), key=lambda e: e.name):
            if entry.name.startswith("nvidia") or entry.name == "kfd":
                found.append(entry.path)
    with contextlib.suppress(OSError):
        render = os.path.join(dev, "dri")
        found += sorted(e.path for e in os.scandir(render) if e.name.startswith("renderD"))
    return found


def _paths(name: str, value: Iterable[str | os.PathLike[str]] | str) -> tuple[str, ...]:
    if isinstance(value, (str, os.PathLike)):
        raise ValueError(f"Sandbox.{name} takes a list of paths, not one path: [{str(value)!r}]")
    found = []
    for path in value:
        if not isinstance(path, (str, os.PathLike)) or not str(path).strip():
            raise ValueError(f"Sandbox.{name} holds paths, not {path!r}")
        found.append(str(Path(path).expanduser().absolute()))
    return tuple(dict.fromkeys(found))
