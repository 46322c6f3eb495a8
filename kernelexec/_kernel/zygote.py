"""A kernel zygote: a template process that forks ready-imported kernels.

Run by path, like ``boot.py``, with the kernel's Python (standard library and
ipykernel only): ``python zygote.py FD``, where FD is its end of a Unix
``SOCK_SEQPACKET`` socket pair; each message is one JSON object, and a fork
request carries the kernel's stderr as a passed descriptor.

The zygote imports ipykernel, IPython, the debugger and the modules a
session's preload imports, once; makes the IPython shell its kernels take
(``made.py``: it reads the user's IPython config files to do so, as any
IPython start does); freezes that heap (``gc.freeze()``, so the children's
collector never writes to those pages and they stay shared copy-on-write);
and then forks a kernel per request. It stays single-threaded (a fork copies
only the calling thread, and a lock held by another thread would stay locked
in the child forever) and runs no code of anyone's but the imports and those
config files.

A forked child does all that is per kernel, as a freshly exec'd ``boot.py``
would: its own session and process group, its cwd and environment, fresh
random state, the same confinement and supervisor (``guard.protect``), then
ipykernel's app on its own connection file, sockets and threads.

Messages, owner to zygote: ``{"imports": [...], "share_pages": BOOL}`` first
(``share_pages``: offer its memory to same-page merging, ``merge.py``), then
``{"fork": ID, "connection_file": ..., "cwd": ..., "env": {...}, "sandbox": {...}}``
(with one descriptor, the kernel's stderr; ``sandbox``, the policy of a
contained kernel, or null) and ``{"release": PID}``. Zygote to owner:
``{"ready": PID}`` or ``{"failed": why, "status": N}``; ``{"forked": ID, "pid": PID}``;
``{"exited": PID, "status": CODE}`` (``Popen.returncode`` style). An exited
child stays a zombie until released, so its pid cannot be reused under the
owner's feet.

The zygote ends when its owner does (its socket closes), without touching
the kernels: each kernel's supervisor watches the owner itself, not the
zygote, so a zygote that dies takes no session's state with it.
"""

from __future__ import annotations

import atexit
import contextlib
import gc
import json
import os
import select
import signal
import socket
import sys
from typing import Any, NoReturn

_HERE = os.path.dirname(os.path.abspath(__file__))
_MESSAGE = 1 << 20  # bytes: a fork request is a few KB of environment
# What a started kernel imports beyond ``ipykernel.kernelapp`` (measured on
# ipykernel 7 with IPython 8 and 9): imported here, a child finds them in
# sys.modules, and keeps the zygote's lists of modules (quick.py), which it
# does only where it has imported none since.
_KERNEL_MODULES = (
    "ipykernel.ipkernel",
    "ipykernel.zmqshell",
    "ipykernel.debugger",
    "IPython.core.completerlib",
    "IPython.core.debugger",
    "IPython.core.logger",
    "IPython.core.oinspect",
    "IPython.extensions.storemagic",
    "IPython.utils.wildcard",
    "sqlite3",
    "pdb",
    "concurrent.futures.thread",
    "tornado.platform.asyncio",
    "faulthandler",
)
_INLINE = "module://matplotlib_inline.backend_inline"


def _boot() -> Any:
    """boot.py, loaded by path (its ``load`` finds the other kernel modules)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "kernelexec_kernel_boot", os.path.join(_HERE, "boot.py")
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def main() -> None:
    channel = socket.socket(fileno=int(sys.argv[1]))
    boot = _boot()
    guard = boot.load("guard")
    guard.drop_capabilities()
    guard.set_undumpable()
    # Terminal signals are for the owner; a child gets Python's defaults back.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    owner = os.getppid()
    owner_fd = boot.load("fork").pidfd(owner)
    first = _receive(channel)[0]
    imports = first.get("imports", [])
    try:
        from ipykernel import kernelapp  # noqa: F401
    except ImportError:
        _send(channel, {"failed": "cannot import ipykernel", "status": boot.NO_IPYKERNEL})
        sys.exit(boot.NO_IPYKERNEL)
    _warm(boot, imports)
    # A kernel's shell, made here once (made.py); before the module lists, as it imports.
    boot.load("made").make(boot.app_class(), boot.app_arguments())
    boot.load("quick").remember_modules()  # after every import: the list its kernels keep
    merge = boot.load("merge") if first.get("share_pages") else None
    gc.collect()
    gc.freeze()
    if merge is not None:
        merge.mark_mergeable()
    _send(channel, {"ready": os.getpid()})
    _serve(channel, boot, owner, owner_fd)


def _warm(boot: Any, imports: list[str]) -> None:
    """Imports what every kernel and this configuration's preload will."""
    import importlib

    for name in _KERNEL_MODULES:
        with contextlib.suppress(Exception):
            importlib.import_module(name)
    for name in (
        "guard",
        "streams",
        "caps",
        "exits",
        "fork",
        "quick",
        "made",
        "usage",
        "variables",
        "data",
    ):
        boot.load(name)
    # What every contained kernel applies: made once here, applied in each.
    with contextlib.suppress(Exception):
        boot.load("contain").prepare(boot.load)
    # ipykernel sets this before any code of the kernel's runs; pyplot reads it
    # when first imported, which is here.
    os.environ.setdefault("MPLBACKEND", _INLINE)
    for statement in imports:
        # Only import statements (the owner picked them out of the preload):
        # one that fails is left for the kernel's preload to report.
        with contextlib.suppress(BaseException):
            exec(statement, {"__name__": "__zygote__"})


def _serve(channel: socket.socket, boot: Any, owner: int, owner_fd: int | None) -> None:
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)  # a handler, so the wake-up fd hears it
    children: set[int] = set()  # forked, not yet reported as exited
    released: set[int] = set()  # the owner is done with them: reap once they end
    # poll, not select: the owner may hold descriptors past select's 1,024.
    watch = select.poll()
    watch.register(channel.fileno(), select.POLLIN)
    watch.register(wake_r, select.POLLIN)
    while True:
        readable = {fd for fd, _ in watch.poll(500)}
        if os.getppid() != owner:
            os._exit(0)
        if wake_r in readable:
            with contextlib.suppress(BlockingIOError):
                os.read(wake_r, 512)
        _report_exits(channel, children)
        _reap(released)
        if channel.fileno() not in readable:
            continue
        message, fds = _receive(channel)
        if not message:
            os._exit(0)  # the owner closed its end, or is gone
        if "fork" in message:
            pid = os.fork()
            if pid == 0:
                for fd in (wake_r, wake_w):
                    os.close(fd)
                _become_kernel(channel, boot, message, fds, owner, owner_fd)
            for fd in fds:
                os.close(fd)
            children.add(pid)
            _send(channel, {"forked": message["fork"], "pid": pid})
        elif "release" in message:
            released.add(int(message["release"]))
            _reap(released)


def _report_exits(channel: socket.socket, children: set[int]) -> None:
    for pid in list(children):
        try:
            found = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:
            children.discard(pid)
            continue
        if found is None:
            continue
        children.discard(pid)
        code = -found.si_status if found.si_code != os.CLD_EXITED else found.si_status
        _send(channel, {"exited": pid, "status": code})


def _reap(released: set[int]) -> None:
    for pid in list(released):
        try:
            done, _ = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            done = pid
        if done:
            released.discard(pid)


def _become_kernel(
    channel: socket.socket,
    boot: Any,
    request: dict[str, Any],
    fds: list[int],
    owner: int,
    owner_fd: int | None,
) -> NoReturn:
    code = 1
    try:
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        channel.close()
        os.setsid()  # its own session and process group, as jupyter_client gives a kernel
        boot.load("fork").redirect(fds[0] if fds else None)
        os.environ.clear()
        os.environ.update(request["env"])
        _forget_cached_dirs()
        os.chdir(request["cwd"])
        os.environ["PWD"] = os.getcwd()
        boot.load("fork").fresh_random()
        _launch(boot, request["connection_file"], owner, owner_fd, request.get("sandbox"))
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:
        import traceback

        traceback.print_exc()
    finally:
        # Never back into the zygote's loop: end as an exec'd kernel would.
        with contextlib.suppress(BaseException):
            atexit._run_exitfuncs()
        with contextlib.suppress(BaseException):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)


def _forget_cached_dirs() -> None:
    """Folders the zygote's imports found from its own environment, found again from the kernel's.

    A contained kernel's temp and matplotlib dirs are its own (``TMPDIR``,
    ``MPLCONFIGDIR``), not the zygote's, which it may not write.
    """
    tempfile: Any = sys.modules.get("tempfile")
    if tempfile is not None:
        tempfile.tempdir = None
    matplotlib = sys.modules.get("matplotlib")
    for name in ("get_configdir", "get_cachedir"):
        with contextlib.suppress(Exception):
            getattr(matplotlib, name).cache_clear()


def _launch(
    boot: Any, connection_file: str, owner: int, owner_fd: int | None, policy: Any = None
) -> None:
    guard = boot.load("guard")
    owner_alive = None if owner_fd is None else (lambda: not boot.load("fork").ended(owner_fd))
    # The owner, not the zygote (this process's parent), is who may release a fork.
    guard.protect(connection_file, owner_alive=owner_alive, owner=owner, box=boot.box(policy))
    if owner_fd is not None:
        os.close(owner_fd)  # only the supervisor watches the owner
    sys.argv = [os.path.join(_HERE, "boot.py"), "-f", connection_file]
    boot.start_app()


def _send(channel: socket.socket, message: dict[str, Any]) -> None:
    channel.send(json.dumps(message).encode())


def _receive(channel: socket.socket) -> tuple[dict[str, Any], list[int]]:
    try:
        data, fds, _, _ = socket.recv_fds(channel, _MESSAGE, 4)
    except OSError:
        return {}, []
    if not data:
        return {}, list(fds)
    return json.loads(data), list(fds)


if __name__ == "__main__":
    main()
