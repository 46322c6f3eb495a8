"""What in this kernel does not survive ``os.fork()``: looked at before a fork is made.

Loaded by ``fork.py`` inside the kernel (standard library only). Each hazard
is a dict ``{"kind", "blocks", "text"}``; ``blocks`` says the copy would be
broken or could hang, so the owner makes the fork by checkpoint and restore
instead (unless told to fork the process anyway). The others are facts the
fork report lists:

- ``cuda`` (blocks): a GPU driver was initialized here (a CUDA or ROCm
  device node is open). A forked child cannot use it: every call fails with
  "initialization error" while ``is_available()`` still says True.
- ``openmp`` (blocks): GNU OpenMP (libgomp, linked by torch, scikit-learn,
  many Cython builds) has a live thread pool. libgomp has no fork handler:
  the child believes the pool's threads exist and its next parallel region
  waits for them forever, deaf to interrupts. OpenBLAS and Intel's and
  LLVM's OpenMP runtimes reset their pools in a forked child, so only
  libgomp counts. An idle pool thread sleeps in a futex call made from
  inside libgomp's own code; a thread whose place cannot be read (running
  each time it is looked at, for 0.1 s) counts as one too, while libgomp is
  loaded, unless it is Python's or ZeroMQ's: on a loaded machine the
  kernel's own (its IOPub thread sending the request's busy status) can wait
  that long for a CPU, and made a quiet kernel look like one with a pool. A
  thread sleeping inside libgomp counts whatever its name.
- ``threads``: threads started by the user's code: a fork has only the
  thread that forked, so they do not run in the copy.
- ``children``: processes this kernel started: they stay the parent's. In
  the copy their ``subprocess.Popen`` objects cannot wait for them
  (``poll()`` says 0 for a process that still runs).
- ``sockets``: listening TCP sockets: the copy holds the same sockets, so
  connections go to either process.

Every look is bounded and never raises: a hazard that cannot be read is not
reported, except libgomp's, which is then assumed.
"""

from __future__ import annotations

import contextlib
import os
import socket
import sys
import threading
import time
from collections.abc import Iterable
from typing import Any

# Device nodes a GPU driver opens when it is initialized (not when a library
# that could use it is merely imported).
_GPU_DEVICES = ("/dev/nvidia", "/dev/kfd", "/dev/dri/renderD")
_GPU_FRAMEWORKS = ("torch", "cupy", "jax", "tensorflow", "numba", "pycuda")
# Threads of the kernel itself (ipykernel's, kernelexec's), by the module
# that defines the thread's class or its target.
_KERNEL_MODULES = ("ipykernel", "IPython", "jupyter_client", "zmq", "tornado", "kernelexec_")
_RUNNING_FOR = 0.1  # seconds a thread seen running is looked at again before it counts
_NOT_LIBGOMPS = ("ZMQbg/",)  # names of native threads that are another library's
_MOST = 8  # items named in one hazard's text


def detect(own_children: Iterable[int] = (), own_ports: Iterable[int] = ()) -> list[dict[str, Any]]:
    """Every hazard in this process; ``own_*`` are the kernel's own (earlier forks, its ports)."""
    found: list[dict[str, Any]] = []
    fds = _fds()
    for look in (
        lambda: cuda_hazard(fds.values(), sys.modules),
        _openmp_look,
        _threads_hazard,
        lambda: _children_hazard(set(own_children)),
        lambda: _sockets_hazard(fds, set(own_ports)),
    ):
        try:
            hazard = look()
        except Exception:  # a look that fails reports nothing rather than stop a fork
            hazard = None
        if hazard is not None:
            found.append(hazard)
    return found


def cuda_hazard(fd_targets: Iterable[str], modules: Iterable[str]) -> dict[str, Any] | None:
    """A ``cuda`` hazard if a GPU device node is among ``fd_targets`` (descriptors' targets)."""
    devices = sorted({t for t in fd_targets if t.startswith(_GPU_DEVICES)})
    if not devices:
        return None
    loaded = [name for name in _GPU_FRAMEWORKS if name in set(modules)]
    by = f" (by {', '.join(loaded)})" if loaded else ""
    return {
        "kind": "cuda",
        "blocks": True,
        "text": (
            f"a GPU driver is initialized{by}, with {', '.join(devices[:_MOST])} open: "
            "a forked copy could not use the GPU"
        ),
    }


def _openmp_look() -> dict[str, Any] | None:
    libgomp = _libgomp_ranges()
    return openmp_hazard(libgomp, _thread_places()) if libgomp else None


def openmp_hazard(
    libgomp: list[tuple[int, int]], places: Iterable[int | None]
) -> dict[str, Any] | None:
    """An ``openmp`` hazard if libgomp is mapped (``libgomp``: its code's address ranges)
    and a thread sleeps inside it, or a thread's place is unknown (``None``)."""
    if not libgomp:
        return None
    pool = sum(1 for pc in places if pc is None or any(lo <= pc < hi for lo, hi in libgomp))
    if not pool:
        return None
    return {
        "kind": "openmp",
        "blocks": True,
        "text": (
            f"GNU OpenMP (libgomp) has a live thread pool ({pool} threads): "
            "a forked copy would hang on its first parallel operation"
        ),
    }


def _fds() -> dict[int, str]:
    """This process's descriptors and what each points at."""
    targets = {}
    for name in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):
            targets[int(name)] = os.readlink(f"/proc/self/fd/{name}")
    return targets


def _libgomp_ranges() -> list[tuple[int, int]]:
    """The executable mappings of libgomp in this process (none: not loaded)."""
    with open("/proc/self/maps", "rb") as maps:
        text = maps.read()
    if b"libgomp" not in text:  # most kernels: no line to split (hundreds with the data stack)
        return []
    ranges = []
    for line in text.decode("utf-8", "replace").splitlines():
        fields = line.split()
        if len(fields) >= 6 and "x" in fields[1] and "libgomp" in os.path.basename(fields[5]):
            low, high = fields[0].split("-")
            ranges.append((int(low, 16), int(high, 16)))
    return ranges


def _thread_places() -> list[int | None]:
    """Where each other thread is: the address it made its system call from; None: running,
    each time it was looked at for ``_RUNNING_FOR``.

    ``/proc/self/task/<tid>/syscall`` is "number args... sp pc" for a thread
    in a system call and "running" for one on a CPU or waiting for one (a
    busy thread, or one between calls).
    """
    me = threading.get_native_id()
    places, running = _places([name for name in os.listdir("/proc/self/task") if int(name) != me])
    # Python's threads and ZeroMQ's are never a pool's: running, they do not count. (A pool's
    # idle threads sleep inside libgomp, and count there whatever names the code gives them.)
    python = {t.native_id for t in threading.enumerate()}  # the main one's may be the zygote's
    running = [
        name
        for name in running
        if int(name) not in python
        and not _read(f"/proc/self/task/{name}/comm").startswith(_NOT_LIBGOMPS)
    ]
    deadline = time.monotonic() + _RUNNING_FOR
    while running and time.monotonic() < deadline:
        time.sleep(0.002)
        more, running = _places(running)
        places += more
    return [*places, *[None] * len(running)]


def _places(names: Iterable[str]) -> tuple[list[int | None], list[str]]:
    """Of the threads ``names``: the places of those in a system call, and those running
    (one that has ended since is in neither)."""
    places: list[int | None] = []
    running = []
    for name in names:
        fields = _read(f"/proc/self/task/{name}/syscall").split()
        if len(fields) > 2:
            places.append(int(fields[-1], 16))
        elif fields == ["running"]:
            running.append(name)
    return places, running


def _read(path: str) -> str:
    """A /proc file's text; empty for a thread that has ended."""
    try:
        with open(path) as file:
            return file.read()
    except OSError:
        return ""


def _threads_hazard() -> dict[str, Any] | None:
    main = threading.main_thread()
    theirs = [
        t for t in threading.enumerate() if t is not main and t.is_alive() and not _kernels(t)
    ]
    if not theirs:
        return None
    names = ", ".join(repr(t.name) for t in theirs[:_MOST])
    return {
        "kind": "threads",
        "blocks": False,
        "text": f"{len(theirs)} thread(s) started by the code ({names}) do not run in the copy",
    }


def _kernels(thread: threading.Thread) -> bool:
    target = getattr(thread, "_target", None)
    modules = (type(thread).__module__, getattr(target, "__module__", None) or "")
    return any(m.startswith(_KERNEL_MODULES) for m in modules) or thread.name.startswith(
        "kernelexec"
    )


def _children_hazard(own: set[int]) -> dict[str, Any] | None:
    me = os.getpid()
    children = []
    for pid in _child_pids():
        if pid in own:
            continue
        with contextlib.suppress(OSError, IndexError, ValueError):
            with open(f"/proc/{pid}/stat", "rb") as file:
                head, _, rest = file.read().rpartition(b")")
            fields = rest.split()
            if int(fields[1]) == me and fields[0] not in (b"Z", b"X"):
                command = head.partition(b"(")[2].decode("utf-8", "replace")
                children.append(f"{pid} ({command})")
    if not children:
        return None
    return {
        "kind": "children",
        "blocks": False,
        "text": (
            f"{len(children)} child process(es) ({', '.join(children[:_MOST])}) stay the "
            "parent's: in the copy their Popen objects cannot wait for them"
        ),
    }


def _child_pids() -> list[int]:
    """This process's children: each thread's ``children`` file (a child is its
    creating thread's), or, where Linux has none, every process, to be read."""
    if not os.path.exists(f"/proc/self/task/{os.getpid()}/children"):  # no CONFIG_PROC_CHILDREN
        return [int(name) for name in os.listdir("/proc") if name.isdigit()]
    pids: list[int] = []
    for tid in os.listdir("/proc/self/task"):
        with contextlib.suppress(OSError):  # a thread that ended since the listing
            with open(f"/proc/self/task/{tid}/children", "rb") as file:
                pids.extend(int(pid) for pid in file.read().split())
    return pids


def _sockets_hazard(fds: dict[int, str], own_ports: set[int]) -> dict[str, Any] | None:
    # Each socket asked itself (a few calls each), not the namespace's whole TCP
    # table, which on a busy machine takes milliseconds to read.
    ports = set()
    for fd, target in fds.items():
        if not target.startswith("socket:["):
            continue
        try:
            sock = socket.socket(fileno=os.dup(fd))
        except OSError:
            continue
        with sock, contextlib.suppress(OSError):
            if sock.family in (socket.AF_INET, socket.AF_INET6) and sock.getsockopt(
                socket.SOL_SOCKET, socket.SO_ACCEPTCONN
            ):
                ports.add(int(sock.getsockname()[1]))
    ports -= own_ports
    if not ports:
        return None
    listed = ", ".join(str(p) for p in sorted(ports)[:_MOST])
    return {
        "kind": "sockets",
        "blocks": False,
        "text": f"listening sockets (port {listed}) are shared with the parent",
    }
