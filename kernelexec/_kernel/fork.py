"""Forking a live kernel: a new kernel holding a copy of this one's Python state.

Loaded by ``boot.py`` inside the kernel (standard library and ipykernel only).
The owner sends a ``kernelexec_fork_request`` on the shell channel, so it is
handled between executions, in the main thread, never in the middle of one.
The handler first looks for what would not survive a fork (``hazards.py``):
unless the request says ``"force"``, a hazard that would leave the copy
broken or hung declines the fork (the owner then checkpoints and restores
instead). Otherwise it forks:

- in this kernel, it answers with the hazards it found and reaps the child
  when it ends (a thread that waits), and goes on as before;
- in the child, it raises ``BecomeFork`` (a ``SystemExit``, so nothing on the
  way catches it) out of the handler, the event loop and ipykernel's app, up
  to ``boot.start_app``, which calls ``become_fork`` once out of its
  ``except`` clause (so no error in the fork is chained to it): outside any
  running loop and with one thread, the child leaves this kernel's session
  and process group, connects to the owner's ``hello`` socket (the owner
  reads the child's identity from that connection, never from a message the
  kernel's code could forge, and the child learns the owner's pid the same
  way), stops using anything of this kernel's (its sockets, streams and the
  descriptors behind them are never touched again, nor closed: they are
  shared with this kernel), becomes a supervised kernel of its own like any
  other (``guard.protect``) and starts a new ipykernel app on the owner's new
  connection file around the old shell, which keeps its user namespace (every
  variable, import, function and class, copy-on-write), history, execution
  count and hooks.

Request: ``{"connection_file", "cwd", "hello", "status_file", "stderr_file", "force"}``.
Reply: ``{"status": "ok" | "declined" | "error", "hazards": [...], "why"}``.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import socket
import struct
import sys
import threading
from typing import Any

REQUEST = "kernelexec_fork_request"
REPLY = "kernelexec_fork_reply"
_KEPT: list[Any] = []  # the old kernel's objects in a fork: never collected, never closed
_HELLO_WITHIN = 10.0  # seconds to reach the owner's hello socket
_CHANNELS = ("shell", "iopub", "stdin", "control", "hb")
_FORKS: set[int] = set()  # this kernel's forks still running: its children, not the code's
_OLD_PORTS: set[int] = set()  # in a fork: the old kernels' own ports, still open here


class BecomeFork(SystemExit):
    """Raised in the forked child only: unwinds the old kernel's app."""

    def __init__(self, request: dict[str, Any]) -> None:
        super().__init__(0)
        self.request = request


def install(kernel: Any, load: Any) -> None:
    """Lets ``kernel`` answer fork requests on its shell channel (``load``: boot's loader)."""
    kernel.shell_handlers[REQUEST] = functools.partial(_on_request, kernel, load)


def _on_request(kernel: Any, load: Any, stream: Any, ident: Any, parent: dict[str, Any]) -> None:
    request = dict(parent.get("content") or {})
    hazards = _hazards(kernel, load)
    if not request.get("force") and any(h["blocks"] for h in hazards):
        declined = {"status": "declined", "hazards": hazards}
        kernel.session.send(stream, REPLY, declined, parent, ident)
        return
    # The module lists a kernel makes as it starts (``quick.py``), made here, in
    # the parent, where the modules' pages are its own: in the child the same
    # scan writes to every module object's page, copying each (some 5 ms and
    # MBs per fork). Made again only once the code has loaded modules since.
    load("quick").remember_modules(changed_only=True)
    # Whatever this kernel has buffered is its own output, not the child's.
    for stream_ in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream_.flush()
    try:
        pid = os.fork()
    except OSError as exc:
        kernel.session.send(stream, REPLY, {"status": "error", "why": str(exc)}, parent, ident)
        return
    if pid == 0:
        raise BecomeFork(request)
    _FORKS.add(pid)
    kernel.session.send(stream, REPLY, {"status": "ok", "hazards": hazards}, parent, ident)
    threading.Thread(target=_reap, args=(pid,), name="kernelexec fork reaper", daemon=True).start()


def _hazards(kernel: Any, load: Any) -> list[dict[str, Any]]:
    own = _own_ports(kernel) | _OLD_PORTS
    found: list[dict[str, Any]] = load("hazards").detect(own_children=set(_FORKS), own_ports=own)
    return found


def _own_ports(kernel: Any) -> set[int]:
    """The kernel's own listening ports: its channels (over TCP), the pipe its IOPub
    thread listens on for forked subprocesses' output, debugpy's."""
    app = getattr(kernel, "parent", None)
    ports = [getattr(app, f"{channel}_port", None) for channel in _CHANNELS]
    ports.append(getattr(getattr(app, "iopub_thread", None), "_pipe_port", None))
    ports.append(getattr(getattr(kernel, "debugger", None), "debugpy_port", None))
    return {int(p) for p in ports if isinstance(p, (int, str)) and str(p).isdigit()}


def _reap(pid: int) -> None:
    # The child is this kernel's until it ends (or this kernel does first, and
    # the supervisor, a subreaper, takes it over): no zombie is left behind.
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, 0)
    _FORKS.discard(pid)


def become_fork(error: BecomeFork, load: Any, start_app: Any) -> None:
    """In the forked child, after the old app has unwound: run as a kernel of its own."""
    request = error.request
    os.setsid()
    owner = _say_hello(request.get("hello"))
    if owner is None:
        os._exit(1)  # the owner never learnt of this copy, so it could never end it
    redirect(_stderr_file(request.get("stderr_file")))
    shell, app = _old_kernel()
    _KEPT.extend([shell, app, getattr(app, "kernel", None)])
    _OLD_PORTS.update(_own_ports(getattr(app, "kernel", None)))
    os.chdir(request["cwd"])
    os.environ["PWD"] = os.getcwd()
    fresh_random()
    owner_fd = pidfd(owner)
    guard = load("guard")
    guard.protect(
        request["connection_file"],
        owner_alive=None if owner_fd is None else (lambda: not ended(owner_fd)),
        owner=owner,
        status_file=request.get("status_file"),
    )
    if owner_fd is not None:
        os.close(owner_fd)  # only the supervisor watches the owner
    load("streams").forget_streams()
    # The shell stays: the new kernel's instance() finds it, with its user
    # namespace, history, count and hooks, and nothing has to be made again.
    _clear_singletons(getattr(app, "kernel", None), app)
    # The old loop's epoll set is shared with the parent kernel: a new one.
    asyncio.set_event_loop(asyncio.new_event_loop())
    sys.argv = [sys.argv[0], "-f", request["connection_file"]]
    start_app(after_init=functools.partial(_take_over, shell))


def _say_hello(path: str | None) -> int | None:
    """Connects to the owner's hello socket: the owner learns this process from the
    connection itself; the owner's pid, read from it too, is returned (None: no owner)."""
    if not path:
        return None
    hello = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        hello.settimeout(_HELLO_WITHIN)
        hello.connect(path)
        # struct ucred {pid_t pid; uid_t uid; gid_t gid}: the listener's, as it listened.
        creds = hello.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
        owner: int = struct.unpack("3i", creds)[0]
        return owner  # nothing is sent: the owner may have closed its end already
    except OSError:
        return None
    finally:
        hello.close()


def _old_kernel() -> tuple[Any, Any]:
    from ipykernel.kernelapp import IPKernelApp
    from IPython.core.interactiveshell import InteractiveShell

    shell = InteractiveShell._instance if InteractiveShell.initialized() else None
    app = IPKernelApp._instance if IPKernelApp.initialized() else None
    return shell, app


def _clear_singletons(*objects: Any) -> None:
    # Each by its own class: clear_instance clears a class and its bases, and
    # instance() of the new app's classes would find the old ones otherwise.
    for obj in objects:
        if obj is not None:
            type(obj).clear_instance()


def _take_over(shell: Any, app: Any) -> None:
    """The kept shell now belongs to the new kernel (which set its new sockets on it)."""
    kernel = getattr(app, "kernel", None)
    if shell is None or kernel is None:
        return
    shell.kernel = kernel
    shell.parent = kernel


def redirect(stderr: int | None) -> None:
    """Points descriptors 0 and 1 at /dev/null and 2 at ``stderr`` (closed after), for a new kernel.

    In a fork, 0-2 are the old kernel's (its output pipes): never write there.
    """
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(null, 1)
    os.dup2(stderr if stderr is not None else null, 2)
    for fd in {null, stderr}:
        if fd is not None:
            os.close(fd)
    sys.stdin = open(0, closefd=False)
    sys.stdout = open(1, "w", closefd=False)
    sys.stderr = open(2, "w", closefd=False)


def _stderr_file(path: str | None) -> int | None:
    if not path:
        return None
    try:
        return os.open(path, os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW)
    except OSError:
        return None


def fresh_random() -> None:
    """New seeds from the OS: two forks must never draw the same numbers.

    Python's ``random`` reseeds itself after a fork; numpy's global generator
    (seeded when numpy.random was imported) does not.
    """
    numpy_random = sys.modules.get("numpy.random")
    if numpy_random is not None:
        with contextlib.suppress(Exception):
            numpy_random.seed()


def pidfd(pid: int) -> int | None:
    """A pidfd of ``pid`` (readable once it ends), or None where there are none."""
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):
        return None


def ended(fd: int) -> bool:
    """Whether the process behind pidfd ``fd`` has ended.

    ``poll``, not ``select``: a server holding many sessions has descriptors
    past select's limit of 1,024.
    """
    import select

    watch = select.poll()
    watch.register(fd, select.POLLIN)
    return bool(watch.poll(0))
