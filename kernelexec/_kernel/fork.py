"""Forking a live kernel: a new kernel holding a copy of this one's Python state.

Loaded by ``boot.py`` inside the kernel (standard library and ipykernel only).
The owner sends a ``kernelexec_fork_request`` on the shell channel, so it is
handled between executions, in the main thread, never in the middle of one.
The handler forks:

- in this kernel, it answers with the child's pid and reaps the child when it
  ends (a thread that waits), and goes on as before;
- in the child, it raises ``BecomeFork`` (a ``SystemExit``, so nothing on the
  way catches it) out of the handler, the event loop and ipykernel's app, up
  to ``boot.start_app``, which calls ``become_fork``: outside any running
  loop and with one thread, the child leaves this kernel's session and process
  group, stops using anything of this kernel's (its sockets, streams and the
  descriptors behind them are never touched again, nor closed: they are
  shared with this kernel), becomes a supervised kernel of its own like any
  other (``guard.protect``) and starts a new ipykernel app on the owner's new
  connection file around the old shell, which keeps its user namespace (every
  variable, import, function and class, copy-on-write), history, execution
  count and hooks.

Request: ``{"connection_file", "cwd", "owner", "status_file", "stderr_file"}``.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import sys
import threading
from typing import Any

REQUEST = "kernelexec_fork_request"
REPLY = "kernelexec_fork_reply"
_KEPT: list[Any] = []  # the old kernel's objects in a fork: never collected, never closed


class BecomeFork(SystemExit):
    """Raised in the forked child only: unwinds the old kernel's app."""

    def __init__(self, request: dict[str, Any]) -> None:
        super().__init__(0)
        self.request = request


def install(kernel: Any) -> None:
    """Lets ``kernel`` answer fork requests on its shell channel."""
    kernel.shell_handlers[REQUEST] = functools.partial(_on_request, kernel)


def _on_request(kernel: Any, stream: Any, ident: Any, parent: dict[str, Any]) -> None:
    request = dict(parent.get("content") or {})
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
    kernel.session.send(stream, REPLY, {"status": "ok", "pid": pid}, parent, ident)
    threading.Thread(target=_reap, args=(pid,), daemon=True).start()


def _reap(pid: int) -> None:
    # The child is this kernel's until it ends (or this kernel does first, and
    # the supervisor, a subreaper, takes it over): no zombie is left behind.
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, 0)


def become_fork(error: BecomeFork, load: Any, start_app: Any) -> None:
    """In the forked child, after the old app has unwound: run as a kernel of its own."""
    request = error.request
    os.setsid()
    redirect(_stderr_file(request.get("stderr_file")))
    shell, app = _old_kernel()
    _KEPT.extend([shell, app, getattr(app, "kernel", None)])
    os.chdir(request["cwd"])
    os.environ["PWD"] = os.getcwd()
    fresh_random()
    owner = int(request["owner"])
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
