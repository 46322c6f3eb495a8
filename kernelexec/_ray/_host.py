"""A Ray node's kernelexec host: the node's kernels, started and spoken to for their owners.

The node side of ``RayBackend`` (``_backend.py``; docs/design-ray.md). One
``NodeHost`` runs on each node a caller uses, as a Ray actor the caller makes
and pins to the node, and lives as long as its owner: kernels it starts are
``LocalBackend`` kernels of this node, forked from the host's zygote once it is
warm, so a session that lands on a warm node starts in tens of milliseconds.
Their supervisors watch the host's process, so no kernel outlives the actor.

Messages travel through the actor: ``receive`` is a long poll that answers
with every message that has come, up to ``most``, as soon as the first has,
and ``execute`` answers with a request's first messages too;
each kernel's messages are already capped on this node (``_caps.py``) before
they are decoded. The owner's side feeds them to its reducer one at a time.

The files of a kernel's work dir on the node, for its owner's files API,
are ``HostFiles``' calls (``_files.py``). ``fork`` makes a kernel's fork on
its node without shared storage: its files copied, its variables checkpointed
into a folder of the node's and loaded into a new kernel configured as the
parent was (``_state``'s checkpoint and restore), the checkpoint then removed.
Not here: a process fork (a node's kernels are contained by default, and a
contained kernel is not forked as a process).

This module imports no ray: the actor's methods are plain coroutines, and the
node's id is asked of Ray only when ``describe`` is called, in the actor.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
import shutil
import signal
import socket
import tempfile
import time
import uuid
from collections import deque
from collections.abc import Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .._backends import KernelMessage, LocalBackend
from .._backends._caps import MAX_MESSAGE_BYTES
from .._backends._cpu import tree_cpu_seconds
from .._containment._platform import choose
from .._containment._sandbox import Sandbox
from .._environment import kernel_env
from .._exceptions import KernelStartError
from .._state._checkpoint import take
from .._state._fork import copy_files
from .._state._restore import load_into
from ._files import HostFiles

__all__ = ["NodeHost"]

log = logging.getLogger("kernelexec")

_MOST = 256  # messages one receive answers with at most
# How long ``execute`` holds a request's messages to send them with its answer: the cell's
# output waits at most _FIRST_WAIT (a long cell's first output is this much later); a cell
# that says nothing yet is waited for up to _QUIET_WAIT, so that a short one, slowed by a
# loaded node, still costs one call. Neither holds a finished cell: its idle status ends it.
_FIRST_WAIT = 0.025
_QUIET_WAIT = 0.25


class NodeHost(HostFiles):
    """The kernels of one Ray node, each known by an id the host gave it.

    Args:
        root: the folder under which each kernel gets its work dir on this
            node; None, a new temp dir (removed when the host shuts down).
        zygote: fork kernels from this host's zygote (see ``LocalBackend``).
    """

    def __init__(self, root: str | None = None, *, zygote: bool | None = None) -> None:
        super().__init__()
        self._made_root = root is None
        self._root = Path(root) if root is not None else Path(tempfile.mkdtemp(prefix="kx-node-"))
        self._zygote = zygote
        self._kernels: dict[str, LocalBackend] = {}
        self._cwds: dict[str, Path] = {}
        self._specs: dict[str, _Spec] = {}  # how each kernel was started: its forks are so too
        self._making: set[str] = set()  # forks under way, by the id their owners gave them
        self._abandoned: set[str] = set()  # ... whose owners stopped waiting
        self._shared: set[str] = set()  # kernels in their owners' work dirs: never removed
        # Kernels started ahead for owners that asked for a pool, by configuration.
        self._ready: dict[str, deque[tuple[str, Path, LocalBackend]]] = {}
        self._filling: dict[str, set[asyncio.Task[None]]] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._closing = False

    def describe(self) -> dict[str, Any]:
        """Where this host runs: its Ray node id and address, process id, host name and root."""
        import ray  # in the actor, where ray is imported already

        return {
            "node_id": ray.get_runtime_context().get_node_id(),
            "address": ray.util.get_node_ip_address(),
            "pid": os.getpid(),
            "hostname": socket.gethostname(),
            "root": str(self._root),
        }

    async def start(
        self,
        *,
        env: dict[str, str],
        max_message_bytes: int = MAX_MESSAGE_BYTES,
        startup_timeout: float = 60.0,
        sandbox: dict[str, Any] | bool | None = None,
        work_dir: str | None = None,
        gpus: list[str] | None = None,
        pool: int = 0,
    ) -> dict[str, Any]:
        """Starts a kernel in a new work dir of this node's; says its id, work dir, pid and time.

        ``work_dir``: the owner's own work dir instead, on storage every node
        mounts at the same path (``RayBackend(shared_work_dirs=True)``); it
        must be an existing folder here, and is the owner's to keep.

        ``env`` is what the owner would send a remote kernel (its extras and
        kernelexec's defaults, ``remote_env``); the rest of the kernel's
        environment is this node's, without credentials. ``sandbox`` is the
        owner's containment: a ``Sandbox.to_dict()``, True, False, or None
        (contained where this node can); a node that cannot give it refuses
        the start, saying what it lacks.

        ``gpus``: the ids of the node's GPUs Ray gave the owner's session. The
        kernel sees those only (``CUDA_VISIBLE_DEVICES``; none when empty),
        and a contained kernel may open the GPU devices (``Sandbox.gpus``).
        None: the node's environment decides, as for a local kernel.

        ``pool``: keep this many kernels of the same configuration ready on
        this node, each in a work dir of its own, so the owner's next session
        takes one instead of starting it (not for shared work dirs or GPUs).
        """
        began = time.perf_counter()
        # Ray's worker threads block SIGINT; the kernel unblocks it itself (boot.py),
        # and so does this thread, for the zygote and supervisors it starts.
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
        policy = Sandbox.from_dict(sandbox) if isinstance(sandbox, dict) else sandbox
        spec = _Spec(kernel_env(env), policy, max_message_bytes, startup_timeout)
        if gpus is not None:
            spec = spec.on_gpus(gpus)
        pooled = pool > 0 and work_dir is None and not gpus
        ready = await self._take_ready(spec.key) if pooled else None
        if ready is not None:
            kernel_id, cwd, backend = ready
        elif work_dir is None:
            kernel_id, cwd = self._new_dir()
            backend = await self._started(spec, kernel_id, cwd)
        else:
            kernel_id, cwd = uuid.uuid4().hex, Path(work_dir)
            if not cwd.is_absolute() or not cwd.is_dir():
                raise KernelStartError(
                    f"the work dir {work_dir} is not a folder on this node: a shared work dir "
                    "must be mounted at the same path on every node"
                )
            self._shared.add(kernel_id)
            backend = await self._started(spec, kernel_id, cwd)
        if pooled:
            self._fill(spec, pool)
        self._adopt(kernel_id, cwd, backend, spec)
        return self._described(kernel_id, backend, pooled=ready is not None, began=began)

    async def fork(
        self,
        kernel_id: str,
        child_id: str,
        *,
        gpus: list[str] | None,
        max_bytes: int | None,
        timeout: float,
        variable_timeout: float,
    ) -> dict[str, Any]:
        """A new kernel of this node holding the kernel's variables, in a new work dir
        holding a copy of its files: what ``start`` says, and the fork's ``files`` (how
        many were copied) and ``left_behind`` (``"name (type): why"`` of each variable
        that could not come).

        ``child_id``: the new kernel's id, the owner's choice (32 hex digits),
        so that an owner who stops waiting can ``abandon`` it.

        ``gpus``: the node's GPUs Ray gave the new session (None: as the
        parent's). ``max_bytes``: what the files, then the variables, may take
        on this node's disk, each (None: what the disk has). ``timeout``:
        seconds for the checkpoint, and then for the load.

        Raises:
            DiskSpaceError: the files or the variables would not fit.
            CheckpointError: the parent could not be checkpointed (no
                cloudpickle, it died or took too long) or its state not loaded.
            KernelStartError: the parent is gone, or the new kernel did not start.
        """
        began = time.perf_counter()
        parent, parent_dir = self._kernel(kernel_id), self._cwds[kernel_id]
        if not re.fullmatch("[0-9a-f]{32}", child_id) or child_id in self._cwds:
            raise KernelStartError(f"{child_id[:64]!r} is no new kernel id (32 hex digits)")
        spec = self._specs[kernel_id]
        if gpus is not None:
            spec = spec.on_gpus(gpus)
        child_dir = self._new_dir(child_id)[1]
        self._making.add(child_id)
        # The checkpoint's folder: the node's, outside both work dirs, gone once loaded.
        staging = Path(tempfile.mkdtemp(prefix=".fork-", dir=self._root))
        child: LocalBackend | None = None
        try:
            files = await asyncio.to_thread(copy_files, parent_dir, None, child_dir, max_bytes)
            saved = await take(
                parent,
                work_dir=parent_dir,
                kernel_dir=str(parent_dir),
                path=staging / "state",
                notebook=parent_dir / "transcript.ipynb",  # only named: it is the owner's
                cells=0,
                files=False,
                timeout=timeout,
                variable_timeout=variable_timeout,
                max_bytes=max_bytes,
            )
            child = await self._started(spec, child_id, child_dir)
            report = await load_into(
                child,
                saved,
                work_dir=child_dir,
                kernel_dir=str(child_dir),
                on_mismatch="refuse",  # the same node's Python and packages: none differ
                timeout=timeout,
                variable_timeout=variable_timeout,
                files=files,
            )
            if child_id in self._abandoned:
                raise KernelStartError("the fork's owner stopped waiting for it")
        except BaseException:
            if child is not None:
                await child.shutdown(now=True)
            self._remove(child_id, child_dir)
            raise
        finally:
            self._making.discard(child_id)
            self._abandoned.discard(child_id)
            await asyncio.to_thread(shutil.rmtree, staging, True)
        self._adopt(child_id, child_dir, child, spec)
        return {
            **self._described(child_id, child, pooled=False, began=began),
            "files": files,
            "left_behind": [f"{s.name} ({s.type}): {s.reason}" for s in report.skipped],
        }

    async def abandon(self, child_id: str) -> None:
        """The owner of a fork (``fork``'s ``child_id``) stopped waiting for it: its kernel
        is shut down now, or once made, so that no kernel is left that nobody holds."""
        if child_id in self._making:
            self._abandoned.add(child_id)
        else:
            await self.shutdown(child_id)

    def _adopt(self, kernel_id: str, cwd: Path, backend: LocalBackend, spec: _Spec) -> None:
        self._kernels[kernel_id] = backend
        self._cwds[kernel_id] = cwd
        self._specs[kernel_id] = spec

    def _described(
        self, kernel_id: str, backend: LocalBackend, *, pooled: bool, began: float
    ) -> dict[str, Any]:
        """What ``start`` and ``fork`` say of the kernel they made."""
        return {
            "kernel_id": kernel_id,
            "work_dir": str(self._cwds[kernel_id]),
            "pid": backend.pid,
            "forked": backend.forked,
            "sandbox": None if backend.sandbox is None else backend.sandbox.to_dict(),
            "pooled": pooled,
            "seconds": time.perf_counter() - began,
        }

    async def cpu_seconds(self, kernel_id: str) -> float | None:
        """CPU seconds of the kernel's process tree, read from this node's /proc (not
        from what the kernel reports); None when it no longer runs."""
        backend = self._kernels.get(kernel_id)
        pid = None if backend is None else backend.pid
        if pid is None:
            return None
        return (await asyncio.to_thread(tree_cpu_seconds, [pid])).get(pid)

    def ready(self) -> int:
        """Kernels waiting in this host's pools, every configuration's together."""
        return sum(len(waiting) for waiting in self._ready.values())

    def _new_dir(self, kernel_id: str | None = None) -> tuple[str, Path]:
        kernel_id = kernel_id or uuid.uuid4().hex
        cwd = self._root / kernel_id
        cwd.mkdir(mode=0o700)
        return kernel_id, cwd

    async def _started(self, spec: _Spec, kernel_id: str, cwd: Path) -> LocalBackend:
        backend = LocalBackend(
            startup_timeout=spec.startup_timeout,
            zygote=self._zygote,
            max_message_bytes=spec.max_message_bytes,
            sandbox=spec.policy,
        )
        try:
            await backend.start(cwd=cwd, env=spec.env)
        except BaseException:
            await backend.shutdown(now=True)
            self._remove(kernel_id, cwd)
            raise
        return backend

    async def _take_ready(self, key: str) -> tuple[str, Path, LocalBackend] | None:
        waiting = self._ready.get(key)
        while waiting:
            kernel_id, cwd, backend = waiting.popleft()
            if await backend.is_alive():
                return kernel_id, cwd, backend
            self._spawn(self._discard(kernel_id, cwd, backend))
        return None

    def _fill(self, spec: _Spec, size: int) -> None:
        """Starts kernels of ``spec`` in the background until ``size`` wait (or are coming)."""
        waiting = self._ready.setdefault(spec.key, deque())
        coming = self._filling.setdefault(spec.key, set())
        for _ in range(size - len(waiting) - len(coming)):
            task = self._spawn(self._ready_one(spec))
            coming.add(task)
            task.add_done_callback(coming.discard)

    async def _ready_one(self, spec: _Spec) -> None:
        kernel_id, cwd = self._new_dir()
        try:
            backend = await self._started(spec, kernel_id, cwd)
            await backend.warm_up()
        except Exception as exc:  # the owner's next start, cold, says why
            log.warning("kernelexec: a ready kernel could not be started: %s", exc)
            return
        if self._closing:
            await self._discard(kernel_id, cwd, backend)
        else:
            self._ready.setdefault(spec.key, deque()).append((kernel_id, cwd, backend))

    async def _discard(self, kernel_id: str, cwd: Path, backend: LocalBackend) -> None:
        await backend.shutdown()
        self._remove(kernel_id, cwd)

    def _spawn(self, work: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        task = asyncio.get_running_loop().create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def execute(
        self, kernel_id: str, code: str, allow_stdin: bool
    ) -> tuple[str, list[KernelMessage], bool, float]:
        """The request's msg_id, and what ``receive`` would answer next.

        The first messages come with the answer: all of a request done within
        ``_QUIET_WAIT`` (its reply and the kernel's idle status are in); of a
        longer one, those that came by then, or by ``_FIRST_WAIT`` after its
        first output, which is not held longer. A short cell so costs its owner
        one call to this actor, not three or four, even on a loaded node.
        """
        backend = self._kernel(kernel_id)
        msg_id = await backend.execute(code, allow_stdin=allow_stdin)
        deadline = time.monotonic() + _QUIET_WAIT
        messages: list[KernelMessage] = []
        replied = idle = False
        while not (replied and idle) and len(messages) < _MOST:
            message = await backend.receive(max(0.0, deadline - time.monotonic()))
            if message is None:
                break
            messages.append(message)
            channel, msg = message
            if msg.get("msg_type") not in ("status", "execute_input"):
                deadline = min(deadline, time.monotonic() + _FIRST_WAIT)
            if msg.get("parent_header", {}).get("msg_id") == msg_id:
                replied = replied or channel == "shell"
                idle = idle or (
                    msg.get("msg_type") == "status"
                    and msg.get("content", {}).get("execution_state") == "idle"
                )
        return msg_id, messages, await backend.is_alive(), time.monotonic()

    async def request_kernel_info(self, kernel_id: str) -> str:
        return await self._kernel(kernel_id).request_kernel_info()

    async def receive(
        self, kernel_id: str, timeout: float, most: int = _MOST
    ) -> tuple[list[KernelMessage], bool, float]:
        """What came within ``timeout``: the messages (all that are there once one has),
        whether the kernel is alive, and this node's ``time.monotonic()``.

        The owner's next ``is_alive`` needs no call of its own. A "dropped"
        notice says when the drop was seen in this node's monotonic clock
        (``_caps.dropped_notice``); the owner moves it into its own clock
        with the time sent alongside.
        """
        backend = self._kernel(kernel_id)
        first = await backend.receive(timeout)
        messages = [] if first is None else [first]
        while messages and len(messages) < most:
            more = await backend.receive(0)
            if more is None:
                break
            messages.append(more)
        return messages, await backend.is_alive(), time.monotonic()

    async def send_input(self, kernel_id: str, value: str) -> None:
        await self._kernel(kernel_id).send_input(value)

    async def interrupt(self, kernel_id: str) -> None:
        await self._kernel(kernel_id).interrupt()

    async def restart(self, kernel_id: str) -> None:
        await self._kernel(kernel_id).restart()

    async def ask_control(
        self, kernel_id: str, msg_type: str, content: dict[str, Any], reply: str, timeout: float
    ) -> dict[str, Any] | None:
        """A request to the kernel's boot script on its control channel (variables, no cell)."""
        return await self._kernel(kernel_id).ask_control(msg_type, content, reply, timeout)

    async def is_alive(self, kernel_id: str) -> bool:
        backend = self._kernels.get(kernel_id)
        return backend is not None and await backend.is_alive()

    def exit_reason(self, kernel_id: str) -> str | None:
        backend = self._kernels.get(kernel_id)
        return None if backend is None else backend.exit_reason()

    async def shutdown(self, kernel_id: str) -> None:
        """Stops the kernel and removes the work dir it made; safe to call twice."""
        backend = self._kernels.pop(kernel_id, None)
        self._specs.pop(kernel_id, None)
        if backend is not None:
            self._drop_files(kernel_id)
            await backend.shutdown()
            self._remove(kernel_id, self._cwds.pop(kernel_id, None))

    def _remove(self, kernel_id: str, cwd: Path | None) -> None:
        if kernel_id in self._shared:
            self._shared.discard(kernel_id)
        elif cwd is not None:
            shutil.rmtree(cwd, ignore_errors=True)

    async def close(self) -> None:
        """Stops every kernel of this host, ready ones too (and removes the root it made)."""
        self._closing = True
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        for waiting in self._ready.values():
            while waiting:
                await self._discard(*waiting.popleft())
        for kernel_id in list(self._kernels):
            await self.shutdown(kernel_id)
        if self._made_root:
            shutil.rmtree(self._root, ignore_errors=True)

    def _kernel(self, kernel_id: str) -> LocalBackend:
        backend = self._kernels.get(kernel_id)
        if backend is None:
            raise KernelStartError(f"no kernel {kernel_id} on this node (it was shut down)")
        return backend


@dataclass(frozen=True)
class _Spec:
    """How a kernel is started: the same spec, the same kind of ready kernel."""

    env: dict[str, str]
    policy: Sandbox | bool | None
    max_message_bytes: int
    startup_timeout: float

    def on_gpus(self, gpus: list[str]) -> _Spec:
        """The same, for a kernel given these GPUs of the node: it sees those only
        (``CUDA_VISIBLE_DEVICES``, empty for none) and, contained, may open the GPU devices."""
        env = {**self.env, "CUDA_VISIBLE_DEVICES": ",".join(gpus)}
        policy = _with_gpus(self.policy) if gpus else self.policy
        return _Spec(env, policy, self.max_message_bytes, self.startup_timeout)

    @property
    def key(self) -> str:
        policy = self.policy.to_dict() if isinstance(self.policy, Sandbox) else self.policy
        return json.dumps([sorted(self.env.items()), policy, self.max_message_bytes])


def _with_gpus(asked: Sandbox | bool | None) -> Sandbox | bool:
    """The containment asked for, with the GPU devices open (False stays uncontained)."""
    chosen = choose(asked)
    return False if chosen is None else Sandbox.from_dict({**chosen.to_dict(), "gpus": True})
