"""A local kernel's process: launched through the boot script, asked to stop, its exit read.

``LocalBackend`` (``_local.py``) holds the process; these are the pieces that
need nothing of it: the kernelspec that launches ipykernel through
``_kernel/boot.py``, the one ZMQ context every kernel shares, the polite
shutdown request sent before the process tree is ended, and an exit status in
words.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import time
from collections.abc import Mapping
from typing import Any

import zmq.asyncio
from jupyter_client.kernelspec import KernelSpec, KernelSpecManager
from jupyter_client.manager import AsyncKernelManager
from jupyter_client.session import Session

from .._kernel import BOOT_SCRIPT

__all__ = [
    "QUIET_CAP",
    "BootSpecs",
    "ask_forked_to_stop",
    "ask_to_stop",
    "context",
    "describe_exit",
]

_CONTEXT: zmq.asyncio.Context | None = None
# Sockets that only send (a shutdown request): whatever comes back is never
# read, so libzmq may hold no more than this of it.
QUIET_CAP = 64 * 1024
_SHUTDOWN_WAIT = 1.0  # seconds a kernel gets to stop when asked, before it is killed


def context() -> zmq.asyncio.Context:
    # One zmq context (one I/O thread) for every kernel, not one each.
    global _CONTEXT
    if _CONTEXT is None:
        _CONTEXT = zmq.asyncio.Context()
        # libzmq's default, 1,023 sockets, is about 340 kernels (three sockets
        # each): a server holding more failed with "Too many open files".
        # Set before the first socket; the open-files limit still applies.
        _CONTEXT.set(zmq.MAX_SOCKETS, _CONTEXT.get(zmq.SOCKET_LIMIT))
        # For the sockets jupyter_client makes in it (a shutdown request's
        # control socket): ours set the session's cap themselves.
        _CONTEXT.setsockopt(zmq.MAXMSGSIZE, QUIET_CAP)
    return _CONTEXT


class BootSpecs(KernelSpecManager):
    """Serves a spec that launches ipykernel through kernelexec's boot script."""

    def __init__(self, python: str, *, contained: bool = False) -> None:
        super().__init__()
        # A contained kernel's boot makes a user namespace, which a process with
        # threads cannot: Python starts without its site (whose .pth files and
        # sitecustomize may start threads, as OpenTelemetry's auto-instrumentation
        # does), and boot runs it in the kernel once the namespaces are made.
        isolated = ["-S"] if contained else []
        self._argv = [python, *isolated, str(BOOT_SCRIPT), "-f", "{connection_file}"]

    def get_kernel_spec(self, kernel_name: str) -> KernelSpec:
        return KernelSpec(
            argv=self._argv,
            display_name="Python 3 (kernelexec)",
            language="python",
            interrupt_mode="signal",
            env={},
            metadata={},
        )


async def ask_to_stop(km: AsyncKernelManager) -> None:
    """Asks a kernel jupyter_client started to shut down; waits a moment for it to."""
    # A shutdown_request; a kernel booted by kernelexec then exits, and its
    # supervisor ends the kernel's tree and exits too.
    process = getattr(km.provisioner, "process", None)
    if process is None or process.poll() is not None:
        return
    with contextlib.suppress(OSError, RuntimeError, zmq.ZMQError):
        await km.request_shutdown()
    deadline = time.monotonic() + _SHUTDOWN_WAIT
    while process.poll() is None and time.monotonic() < deadline:
        await asyncio.sleep(0.02)


async def ask_forked_to_stop(
    process: Any, info: Mapping[str, Any] | None, session: Session
) -> None:
    """Asks a forked kernel (``info``: its connection) to shut down; waits a moment for it to."""
    # What jupyter_client's request_shutdown does: a shutdown_request on control.
    if process is None or info is None or process.poll() is not None:
        return
    sock: zmq.Socket[bytes] = zmq.Socket(context(), zmq.DEALER)
    try:
        sock.linger = 0
        sock.maxmsgsize = QUIET_CAP
        sock.connect(f"ipc://{info['ip']}-{info['control_port']}")
        session.send(sock, "shutdown_request", {"restart": False})
        deadline = time.monotonic() + _SHUTDOWN_WAIT
        while process.poll() is None and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
    except zmq.ZMQError:
        pass
    finally:
        sock.close()


def describe_exit(code: int | None) -> str | None:
    if code is None:
        return None
    if code < 0:
        try:
            return f"signal {signal.Signals(-code).name}"
        except ValueError:
            return f"signal {-code}"
    return f"exit status {code}"
