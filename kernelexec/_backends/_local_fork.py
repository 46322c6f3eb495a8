"""Forking a local kernel: the request on its shell channel, the witness, the release.

The fork request is queued on the shell channel behind any execution, so the
copy is taken between executions. The kernel first looks for what would not
survive the fork (a GPU context, a live OpenMP pool: ``_kernel/hazards.py``);
unless ``force``, such a hazard declines the fork. The fork is known by its
connection to a socket of ours (``_fork_witness.py``), never by the pid in the
kernel's reply, and it becomes a kernel of its own (``_kernel/fork.py``) on a
connection file of the new backend's making. The parent kernel's supervisor is
told (by this process, the only one it listens to) that the fork is not its to
end: the fork outlives the parent.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .._exceptions import KernelStartError
from .._kernel.fork import REPLY as FORK_REPLY
from .._kernel.fork import REQUEST as FORK_REQUEST
from .._kernel.guard import end_tree, release
from ._base import KernelMessage
from ._fork_witness import ForkWitness
from ._kernel_fork import ForkHazard, KernelFork, ProcessFork
from ._zmq import KernelSockets

if TYPE_CHECKING:
    from ._local import LocalBackend

__all__ = ["fork_kernel"]


async def fork_kernel(
    parent: LocalBackend, *, cwd: Path, env: dict[str, str], force: bool
) -> ProcessFork:
    """The body of ``LocalBackend.fork``: a new backend whose kernel is a fork of ``parent``'s."""
    channels, supervisor = parent._channels, parent._process
    if channels is None or supervisor is None or not parent.can_fork():
        raise KernelStartError("only a running kernel started by kernelexec can be forked")
    child = parent.fresh()
    child._cwd, child._env = cwd, env
    path = child._new_connection()
    assert child._ipc_dir is not None
    status, stderr = child._ipc_dir / "status", child._ipc_dir / "stderr"
    stderr.touch(mode=0o600)
    child._stderr = stderr.open("rb")
    witness = ForkWitness(child._ipc_dir / "hello", supervisor.pid)
    request = {
        "connection_file": path,
        "cwd": str(cwd),
        "hello": str(witness.path),
        "status_file": str(status),
        "stderr_file": str(stderr),
        "force": force,
    }

    def adopt(pid: int, pidfd: int) -> None:
        # At once, so that any failure from here on ends it with child.shutdown.
        child._adopt(KernelFork(pid, status, pidfd))

    try:
        hazards = await _ask_to_fork(parent, channels, request, witness, adopt)
        if child._process is None:  # declined
            await child.shutdown(now=True)
            return ProcessFork(None, hazards)
        pid = child._process.pid
        # The fork outlives this kernel: its supervisor and this process's
        # own clean-up (_end_tree) must both leave it alone.
        parent._released.add(pid)
        release(supervisor.pid, pid)
        await child._wait_ready()
    except BaseException:
        await child.shutdown(now=True)
        raise
    finally:
        witness.close()
    return ProcessFork(child, hazards)


async def _ask_to_fork(
    parent: LocalBackend,
    channels: KernelSockets,
    request: dict[str, Any],
    witness: ForkWitness,
    adopt: Callable[[int, int], None],
) -> tuple[ForkHazard, ...]:
    """Asks for a fork; ``adopt``s it once it has connected to ``witness``; its hazards.

    Returns without adopting anything if the kernel declined. Other
    messages stay queued. A reply that says "ok" is believed only once
    the fork has connected.
    """
    msg_id = channels.send("shell", FORK_REQUEST, request)
    others: list[KernelMessage] = []
    forked = asyncio.ensure_future(witness.fork())
    hazards: tuple[ForkHazard, ...] | None = None
    deadline = time.monotonic() + parent.startup_timeout
    try:
        while True:
            if forked.done() and hazards is not None:
                adopt(*forked.result())
                return hazards
            if time.monotonic() >= deadline:
                raise KernelStartError(
                    f"the kernel's fork did not come within {parent.startup_timeout:g} s"
                )
            if hazards is not None:
                # The reply came: a fork that connects comes within moments, a new
                # process below the kernel from the moment the kernel answered.
                if not forked.done() and not witness.anything_new():
                    raise KernelStartError(
                        "the kernel said it forked, but no new process is below it "
                        "(its fork handler was replaced?); nothing was forked"
                    )
                await asyncio.wait({forked}, timeout=0.2)
                if not forked.done() and not await parent.is_alive():
                    raise KernelStartError(f"the kernel died ({parent.exit_reason()})")
                continue
            item = await channels.receive(0.05 if forked.done() else 0.2)
            if item is None:
                if not await parent.is_alive():
                    raise KernelStartError(f"the kernel died ({parent.exit_reason()})")
                continue
            channel, msg = item
            if msg["parent_header"].get("msg_id") != msg_id:
                others.append(item)
            elif channel == "shell" and msg["header"]["msg_type"] == FORK_REPLY:
                content = msg["content"]
                found = ForkHazard.listed(content.get("hazards"))
                if content.get("status") == "declined":
                    return found
                if content.get("status") != "ok":
                    why = str(content.get("why", "no reason given"))[:500]
                    raise KernelStartError(f"the kernel could not fork: {why}")
                hazards = found
    finally:
        channels.put_back(others)
        if not forked.done():
            forked.cancel()
        elif not forked.cancelled() and forked.exception() is None:
            pid, pidfd = forked.result()
            if hazards is None:  # it came, but was not adopted: end it with its tree
                end_tree(pid)
                with contextlib.suppress(OSError):
                    signal.pidfd_send_signal(pidfd, signal.SIGKILL)
                os.close(pidfd)
