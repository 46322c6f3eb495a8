"""``RayBackend``: a session's kernel on a node of a Ray cluster, placed by Ray.

For each kernel the backend reserves the session's resources as a Ray
placement group of one bundle (``num_cpus``, ``memory``, ``num_gpus``, custom
resources, node labels), so Ray chooses the node and counts what the session
holds; then the node's ``NodeHost`` (``_host.py``), one actor per node per
caller, started on first use and kept warm, starts the kernel from its zygote.
Every call and message goes through that actor (docs/design-ray.md says why).

A node that stops answering is an answer, not a hang: a call that fails
with Ray's actor errors, or a poll unanswered ``lost_after`` seconds past its
own wait, makes the kernel dead with the reason "node lost: ...", and the
session reports ``kernel_died`` as for any death (and, with ``auto_restart``,
the next execution gets a kernel on a node Ray chooses again). The host of a
lost node is killed, so a node that was only cut off keeps no kernel nobody
hears.

Ownership: the hosts are actors of this process, not detached, so Ray ends
them when this process ends, and their kernels' supervisors end the kernels.

ray is imported when the first kernel starts, so ``kernelexec`` imports
without the ``ray`` extra.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import time
import uuid
from collections import deque
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .._backends import KernelMessage
from .._backends._caps import DROPPED, MAX_MESSAGE_BYTES
from .._containment._sandbox import Sandbox
from .._environment import remote_env
from .._exceptions import ConfigurationError, KernelexecError, KernelStartError
from .._workdir import Refused
from ._files import NodeAccess, bring_back
from ._host import _QUIET_WAIT

__all__ = ["RayBackend", "join"]

log = logging.getLogger("kernelexec")

# What a host may take for a call that does not wait on the kernel (an interrupt, a
# shutdown), before its node counts as lost.
_CALL_SECONDS = 30.0
# A poll's answer says whether the kernel lives; trusted for this long after.
_ALIVE_FOR = 1.0
# This process's hosts, one per node (and zygote choice), made on first use.
_HOSTS: dict[tuple[str, bool | None], Any] = {}
# Nodes this process saw lost, and when. Ray's GCS marks a node dead only after
# its health checks fail (13 s here, by default); until then it could place a
# session there again, so a lost node is left out of placements for a while,
# after which the GCS's word stands (a host that hung on a healthy node).
_LOST_NODES: dict[str, float] = {}
_LEFT_OUT_FOR = 60.0
_NODE_ID_LABEL = "ray.io/node-id"
# What of a kernel's files on its node comes into the caller's work dir when it stops.
BRING_BACK_BYTES = 2**30


class RayBackend:
    """A kernel on a Ray cluster node that has the session's resources free.

    Args:
        address: the cluster to join when this process has not joined one
            (``ray.init(address=...)``): ``"host:port"`` of its GCS, or
            ``"auto"`` on a node of it; None: ``"auto"``.
        num_cpus: CPUs the session holds in Ray's accounting (it does not pin
            the kernel to them).
        memory: bytes the session holds in Ray's accounting.
        num_gpus: GPUs the session holds: Ray picks them on the node, and the
            kernel sees those (``CUDA_VISIBLE_DEVICES``) and may use them even
            contained (``Sandbox(gpus=True)`` is implied). A session without
            GPUs sees none (``CUDA_VISIBLE_DEVICES`` empty).
        resources: custom resources the session holds (``{"highmem": 1}``).
        labels: node labels the node must have (``{"zone": "a"}``).
        sandbox: the kernel's containment on its node (see ``LocalBackend``):
            None contains it where the node can.
        zygote: fork kernels from the node host's zygote (see ``LocalBackend``).
        startup_timeout: seconds for the resources to be found and the kernel
            to answer.
        lost_after: seconds a node host may leave a call unanswered, past the
            call's own wait, before its node counts as lost.
        shared_work_dirs: the session's work dir is on storage every node
            mounts at the same path (NFS, CephFS, a cloud file system): the
            kernel runs in it, so its files, checkpoints, forks and restores
            (on any node) work as locally. Without it, the kernel's folder is
            its node's own: its files come through its node's host, a fork is
            made on the same node, and a checkpoint (a restore, a restart
            keeping state) is refused with ``CheckpointError``.
        pool: kernels of this configuration the node's host keeps ready, each
            in a folder of its own, so that the next session placed there
            takes one (``node["pooled"]`` says so) instead of starting it; 0:
            none. Not with shared work dirs, nor for sessions holding GPUs.
    """

    forks_as_process = False
    pid = None  # the kernel's process is on its node, not in this machine's /proc

    def __init__(
        self,
        address: str | None = None,
        *,
        num_cpus: float = 1,
        memory: int | None = None,
        num_gpus: float = 0,
        resources: Mapping[str, float] | None = None,
        labels: Mapping[str, str] | None = None,
        sandbox: Sandbox | bool | None = None,
        zygote: bool | None = None,
        startup_timeout: float = 60.0,
        lost_after: float = 5.0,
        shared_work_dirs: bool = False,
        pool: int = 0,
    ) -> None:
        self.address = address
        self._settings: dict[str, Any] = {
            "num_cpus": num_cpus,
            "memory": memory,
            "num_gpus": num_gpus,
            "resources": dict(resources or {}),
            "labels": dict(labels or {}),
            "sandbox": sandbox,
            "zygote": zygote,
            "startup_timeout": startup_timeout,
            "lost_after": lost_after,
            "shared_work_dirs": shared_work_dirs,
            "pool": pool,
        }
        self.shared_work_dirs = bool(shared_work_dirs)
        self.bundle = _bundle(num_cpus, memory, num_gpus, resources)
        self.labels = dict(labels or {})
        if not all(isinstance(k, str) and isinstance(v, str) for k, v in self.labels.items()):
            raise ConfigurationError("RayBackend labels map names to values, both strings")
        if sandbox is not None and not isinstance(sandbox, (bool, Sandbox)):
            raise ConfigurationError("RayBackend sandbox is None, True, False or a Sandbox")
        if isinstance(pool, bool) or not isinstance(pool, int) or not 0 <= pool <= 64:
            raise ConfigurationError("RayBackend pool is a number of kernels from 0 to 64")
        self.pool = pool
        if not lost_after > 0 or not startup_timeout > 0:
            raise ConfigurationError("RayBackend lost_after and startup_timeout are seconds > 0")
        self.sandbox_asked = sandbox
        self.zygote = zygote
        self.startup_timeout = startup_timeout
        self.lost_after = lost_after
        self.max_message_bytes = MAX_MESSAGE_BYTES
        # Where the running kernel is: node id and address, host pid, work dir on its node.
        self.node: dict[str, Any] = {}
        self.sandbox: Sandbox | None = None  # the policy in force on the node
        self._host: Any = None
        self._group: Any = None  # the placement group holding the session's resources
        self._kernel: str | None = None
        self._cwd = Path.cwd()
        self._env: dict[str, str] = {}
        self._batch: deque[KernelMessage] = deque()
        self._alive_at = 0.0  # when a poll last said the kernel lives
        self._lost: str | None = None  # why the node counts as lost
        self._reason: str | None = None

    @property
    def _reachable(self) -> bool:
        """A kernel is running, on a node not lost."""
        return self._kernel is not None and self._lost is None

    @property
    def checkpoints(self) -> bool:
        """Whether this kernel can be checkpointed: its work dir is the caller's (shared)."""
        return self.shared_work_dirs

    @property
    def forks_on_node(self) -> bool:
        """Whether a fork is made by the kernel's node host, on its node (``fork_on_node``):
        its work dir is the node's own, so only the node can copy its state."""
        return not self.shared_work_dirs

    def fresh(self) -> RayBackend:
        """A new, unstarted backend with the same settings (a restored fork's)."""
        other = RayBackend(self.address, **self._settings)
        other.max_message_bytes = self.max_message_bytes
        return other

    # -- the KernelBackend protocol

    async def start(self, *, cwd: Path, env: dict[str, str]) -> None:
        await self.shutdown()
        # The caller's work dir: the kernel's own is on its node, unless shared.
        self._cwd, self._env = cwd, env
        self._lost = self._reason = None
        ray = await asyncio.to_thread(join, self.address)
        self._group = await self._reserve(ray)
        try:
            node_id = ray.util.placement_group_table(self._group)["bundles_to_node_id"][0]
            gpus = await self._gpus_of(ray) if "GPU" in self.bundle else []
            self._host, self.node = await _host_on(ray, node_id, self.zygote, self.startup_timeout)
            self.node["gpus"] = gpus
            sandbox = self.sandbox_asked
            started = await self._answer(
                self._host.start.remote(
                    env=remote_env(env),
                    max_message_bytes=self.max_message_bytes,
                    startup_timeout=self.startup_timeout,
                    sandbox=sandbox.to_dict() if isinstance(sandbox, Sandbox) else sandbox,
                    work_dir=str(cwd.resolve()) if self.shared_work_dirs else None,
                    gpus=gpus,
                    pool=self.pool,
                ),
                self.startup_timeout + self.lost_after,
            )
        except BaseException:
            self._release()
            raise
        self._adopt(started, f"the kernel could not be started on its Ray node: {self._lost}")

    def _adopt(self, started: dict[str, Any] | None, failed: str) -> None:
        """The kernel a host started (or forked) for this backend, as the host described it;
        None (its node was lost): the resources are let go and ``failed`` is raised."""
        if started is None:
            self._release()
            raise KernelStartError(failed)
        self._kernel = started["kernel_id"]
        self.node.update(
            work_dir=started["work_dir"], kernel_pid=started["pid"], pooled=started["pooled"]
        )
        policy = started.get("sandbox")
        self.sandbox = None if policy is None else Sandbox.from_dict(policy)
        self._alive_at = time.monotonic()

    async def fork_on_node(
        self,
        *,
        cwd: Path,
        env: dict[str, str],
        max_bytes: int | None,
        timeout: float,
        variable_timeout: float,
    ) -> tuple[RayBackend, int, list[str]]:
        """A new backend, started, whose kernel is a fork of this one made on its node.

        The fork holds resources as this session does, on the same node (it
        waits ``startup_timeout`` for them there); the node's host copies the
        kernel's files there and checkpoints its variables into the new kernel
        (``NodeHost.fork``). ``cwd`` and ``env`` are the new session's.

        Returns:
            The new backend, how many of the kernel's files on the node were
            copied, and the variables that could not come (``"name (type): why"``).

        Raises:
            KernelStartError: the node is lost, has no room, or the new kernel
                did not start.
            CheckpointError, DiskSpaceError: as the host raised them.
        """
        if not self._reachable:
            raise KernelStartError(f"the kernel's Ray node is lost: {self._lost or self._reason}")
        ray = await asyncio.to_thread(join, self.address)
        child = self.fresh()
        child.max_message_bytes = self.max_message_bytes
        child._cwd, child._env = cwd, env
        child._group = await child._reserve(ray, node=self.node["node_id"])
        try:
            gpus = await child._gpus_of(ray) if "GPU" in child.bundle else []
            child._host = self._host
            child.node = {key: self.node[key] for key in ("node_id", "address", "host_pid")}
            child.node["gpus"] = gpus
            child_id = uuid.uuid4().hex
            try:
                made = await self._answer(
                    self._host.fork.remote(
                        self._kernel,
                        child_id,
                        gpus=gpus,
                        max_bytes=max_bytes,
                        timeout=timeout,
                        variable_timeout=variable_timeout,
                    ),
                    2 * timeout + self.startup_timeout + self.lost_after,
                )
            except asyncio.CancelledError:
                # Nobody will hold what the host is making: it is shut down once made.
                self._host.abandon.remote(child_id)
                raise
        except BaseException:
            child._release()
            raise
        child._adopt(made, f"the fork could not be made on the kernel's node: {self._lost}")
        assert made is not None
        return child, int(made["files"]), list(made["left_behind"])

    async def execute(self, code: str, *, allow_stdin: bool) -> str:
        # The host answers with the request's first messages (a short cell's all).
        if self._reachable:
            call = self._host.execute.remote(self._kernel, code, allow_stdin)
            answer = await self._answer(call, _QUIET_WAIT + self.lost_after)
            if answer is not None:
                msg_id, *batch = answer
                self._take(*batch)
                return str(msg_id)
        return f"lost-{uuid.uuid4().hex}"

    async def request_kernel_info(self) -> str:
        return await self._send("request_kernel_info")

    async def receive(self, timeout: float) -> KernelMessage | None:
        if self._batch:
            return self._batch.popleft()
        if not self._reachable:
            await asyncio.sleep(min(timeout, 0.05))
            return None
        answer = await self._answer(
            self._host.receive.remote(self._kernel, timeout), timeout + self.lost_after
        )
        if answer is None:
            return None
        self._take(*answer)
        return self._batch.popleft() if self._batch else None

    def _take(self, messages: list[KernelMessage], alive: bool, node_now: float) -> None:
        """A host's batch of messages, queued to be received, and its word on the kernel."""
        if alive:
            self._alive_at = time.monotonic()
        # A drop's time, from the node's monotonic clock into this one's (an upper bound).
        shift = time.monotonic() - node_now
        for channel, msg in messages:
            if channel == DROPPED:
                msg["content"]["at"] += shift
        self._batch.extend(messages)

    async def send_input(self, value: str) -> None:
        await self._quiet("send_input", value)

    async def interrupt(self) -> None:
        await self._quiet("interrupt")

    async def restart(self) -> None:
        """A fresh kernel in the same work dir on its node; on another node if it was lost."""
        self._batch.clear()
        if not self._reachable:
            await self.start(cwd=self._cwd, env=self._env)
            return
        await self._answer(
            self._host.restart.remote(self._kernel), self.startup_timeout + self.lost_after
        )
        if self._lost is not None:  # lost while restarting: start afresh where Ray says
            await self.start(cwd=self._cwd, env=self._env)
            return
        self._reason = None
        self._alive_at = time.monotonic()

    async def shutdown(self) -> None:
        if self._reachable and not self.shared_work_dirs:
            await self._bring_back()
        kernel, self._kernel = self._kernel, None
        self._batch.clear()
        if kernel is not None and self._lost is None:
            await self._answer(self._host.shutdown.remote(kernel), _CALL_SECONDS + self.lost_after)
        self._release()

    async def _bring_back(self) -> None:
        """The kernel's files on its node, copied into the caller's work dir before the
        node's folder goes with the kernel: a closed or culled session keeps its files,
        as a local one does (what does not come is logged)."""
        assert self._kernel is not None
        try:
            copied, left = await bring_back(
                self._host_call, self._kernel, self._cwd, BRING_BACK_BYTES
            )
        except (OSError, KernelexecError) as exc:  # a full disk here, a lost node
            log.warning("kernelexec: the kernel's files on its Ray node did not come: %s", exc)
            return
        if left:
            log.warning(
                "kernelexec: %d files of the kernel came from its Ray node into %s; left "
                "there, and gone with it: %s",
                copied,
                self._cwd,
                "; ".join(left[:20]),
            )

    async def ask_control(
        self, msg_type: str, content: dict[str, Any], reply: str, timeout: float
    ) -> dict[str, Any] | None:
        """A request to the kernel's boot script on its control channel (variables, no cell)."""
        if not self._reachable:
            return None
        answer: dict[str, Any] | None = await self._answer(
            self._host.ask_control.remote(self._kernel, msg_type, content, reply, timeout),
            timeout + self.lost_after,
        )
        return answer

    async def is_alive(self) -> bool:
        if not self._reachable:
            return False
        if time.monotonic() - self._alive_at < _ALIVE_FOR:
            return True
        alive = await self._answer(self._host.is_alive.remote(self._kernel), self.lost_after)
        if alive:
            self._alive_at = time.monotonic()
            return True
        if self._lost is None and self._reason is None:
            self._reason = await self._answer(
                self._host.exit_reason.remote(self._kernel), self.lost_after
            )
        return False

    def exit_reason(self) -> str | None:
        return self._lost or self._reason

    # -- the node's host

    async def _reserve(self, ray: Any, node: str | None = None) -> Any:
        """A placement group holding the session's resources, once Ray has placed it
        (on ``node``, when given: a fork's, on its parent's node)."""
        from ray.util.placement_group import placement_group, remove_placement_group

        selector = dict(self.labels)
        now = time.monotonic()
        lost = sorted(n for n, at in _LOST_NODES.items() if now - at < _LEFT_OUT_FOR)
        if node is not None:
            selector[_NODE_ID_LABEL] = node
        elif lost and _NODE_ID_LABEL not in selector:
            selector[_NODE_ID_LABEL] = f"!in({','.join(lost)})"
        group = placement_group(
            [self.bundle],
            strategy="STRICT_PACK",
            bundle_label_selector=[selector] if selector else None,
        )
        try:
            await asyncio.wait_for(_awaitable(group.ready()), self.startup_timeout)
        except asyncio.TimeoutError:
            remove_placement_group(group)
            wanted = ", ".join(f"{k}={v:g}" for k, v in self.bundle.items())
            labels = f" with labels {self.labels}" if self.labels else ""
            which = "no node of the Ray cluster" if node is None else f"the parent's node {node}"
            raise KernelStartError(
                f"{which} had {wanted} free{labels} within "
                f"{self.startup_timeout:g} s (its nodes: {_capacity(ray)})"
            ) from None
        except BaseException:
            remove_placement_group(group)
            raise
        return group

    async def _gpus_of(self, ray: Any) -> list[str]:
        """The ids of the GPUs Ray gave the session's bundle, asked of a task run in it.

        A bundle holds particular GPUs of its node, and a task in the bundle is
        told which (``ray.get_gpu_ids``): the kernel is then given those
        (``CUDA_VISIBLE_DEVICES``).
        """
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        task = ray.remote(_visible_gpus).options(
            num_cpus=0,
            num_gpus=self.bundle["GPU"],
            scheduling_strategy=PlacementGroupSchedulingStrategy(self._group, 0),
        )
        return list(await asyncio.wait_for(_awaitable(task.remote()), self.startup_timeout))

    async def cpu_seconds(self) -> tuple[str, float] | None:
        """The running kernel's id and the CPU seconds of its process tree, as its node's
        host measures them (a server's CPU quotas); None when no kernel runs."""
        kernel = self._kernel
        if kernel is None or self._lost is not None:
            return None
        found = await self._answer(self._host.cpu_seconds.remote(kernel), _CALL_SECONDS)
        return None if found is None else (kernel, float(found))

    async def node_bytes(self) -> int:
        """Bytes in the kernel's folder on its node, as its host counts them (a tenant's
        work-dir quota adds them to the caller's side); 0 with shared work dirs (all is in
        the caller's), or when no kernel runs on a reachable node."""
        if self.shared_work_dirs or not self._reachable:
            return 0
        found = await self._answer(self._host.files_bytes.remote(self._kernel), _CALL_SECONDS)
        return 0 if found is None else int(found)

    def files(self, root: Path) -> NodeAccess | None:
        """The session's files, its work dir ``root`` here and its kernel's on the node,
        as one (``AsyncSession.file_access``); None when they are all in ``root`` (shared
        work dirs) or no kernel runs."""
        if self.shared_work_dirs or self._kernel is None or self._lost is not None:
            return None
        return NodeAccess(
            root, self._host_call, self.node["node_id"], self._kernel, self.node["work_dir"]
        )

    async def _host_call(self, method: str, *args: Any) -> Any:
        """What the host's ``method`` returned; raises what it raised (``Refused``, a full
        disk), or ``Refused`` when the node is lost."""
        if self._reachable:
            answer = await self._answer(getattr(self._host, method).remote(*args), _CALL_SECONDS)
            if self._reachable:
                return answer
        raise Refused("missing", f"the session's Ray node is lost: {self._lost or self._reason}")

    async def _send(self, method: str, *args: Any) -> str:
        """A request's msg_id; a made-up one if the node is lost (the poll then says dead)."""
        if self._reachable:
            call = getattr(self._host, method).remote(self._kernel, *args)
            msg_id = await self._answer(call, self.lost_after)
            if msg_id is not None:
                return str(msg_id)
        return f"lost-{uuid.uuid4().hex}"

    async def _quiet(self, method: str, *args: Any) -> None:
        if self._reachable:
            await self._answer(
                getattr(self._host, method).remote(self._kernel, *args), _CALL_SECONDS
            )

    async def _answer(self, call: Any, within: float) -> Any:
        """What a host call returned; None if its node is lost (``_lost`` says why)."""
        import ray

        try:
            return await asyncio.wait_for(_awaitable(call), within)
        except asyncio.TimeoutError:
            self._node_lost(f"it did not answer for {within:.1f} s")
        except ray.exceptions.RayTaskError as exc:  # the host's method raised
            # Ours (a start or a checkpoint refused, a disk full), a path refused: as raised.
            if isinstance(exc.cause, (KernelexecError, OSError)):
                raise exc.cause from None
            raise
        except ray.exceptions.RayError as exc:  # its actor, process or node is gone
            self._node_lost(_first_line(exc))
        return None

    def _node_lost(self, why: str) -> None:
        import ray

        where = self.node.get("node_id", "?")
        _LOST_NODES[where] = time.monotonic()
        address = self.node.get("address")
        self._lost = f"node lost: Ray node {where}" + (f" ({address})" if address else "")
        self._lost += f": {why}"
        host, self._host = self._host, None
        for key, value in list(_HOSTS.items()):
            if value is host:
                del _HOSTS[key]  # a later session on that node gets a new host
        if host is not None:
            try:
                ray.kill(host, no_restart=True)  # a node only cut off keeps no kernel
            except Exception:  # already gone with its node
                pass
        self._release()

    def _release(self) -> None:
        group, self._group = self._group, None
        if group is not None:
            from ray.util.placement_group import remove_placement_group

            try:
                remove_placement_group(group)
            except Exception:  # the cluster is gone: nothing is held
                pass


def _bundle(
    num_cpus: float, memory: int | None, num_gpus: float, resources: Mapping[str, float] | None
) -> dict[str, float]:
    bundle: dict[str, float] = {}
    for name, value in (("CPU", num_cpus), ("memory", memory), ("GPU", num_gpus)):
        if value is not None and (isinstance(value, bool) or not value >= 0):
            raise ConfigurationError(f"RayBackend {name}: a number >= 0, not {value!r}")
        if value:
            bundle[name] = float(value)
    for name, value in (resources or {}).items():
        if not isinstance(name, str) or isinstance(value, bool) or not value > 0:
            raise ConfigurationError(f"RayBackend resources: {name!r} needs an amount > 0")
        bundle[name] = float(value)
    if not bundle:
        raise ConfigurationError(
            "RayBackend needs some resource to hold (num_cpus, memory, num_gpus or resources): "
            "Ray places a session by what it holds"
        )
    return bundle


def join(address: str | None) -> Any:
    """ray, with this process joined to the cluster at ``address`` (or the one it joined).

    A ``host:port`` that takes no connection is refused at once: Ray itself
    would keep trying for minutes.

    Raises:
        ConfigurationError: ray is not installed.
        KernelStartError: the cluster cannot be reached.
    """
    try:
        import ray
    except ImportError:
        raise ConfigurationError("RayBackend needs ray: pip install 'kernelexec[ray]'") from None
    if ray.is_initialized():
        return ray
    where = address or "auto"
    host, _, port = where.rpartition(":")
    if host and port.isdigit() and "://" not in where:
        try:
            socket.create_connection((host, int(port)), timeout=5).close()
        except OSError as exc:
            raise KernelStartError(
                f"could not reach the Ray cluster's GCS at {where}: {exc.strerror or exc}"
            ) from None
    # A cluster on this machine's loopback: this driver is there too (else Ray finds
    # its address by trying to reach a public resolver).
    loopback = host in ("localhost", "::1") or host.startswith("127.")
    here: dict[str, Any] = {"_node_ip_address": "127.0.0.1"} if loopback else {}
    try:
        ray.init(
            address=where,
            log_to_driver=False,
            configure_logging=False,
            include_dashboard=False,
            **here,
        )
    except (ConnectionError, ValueError, RuntimeError) as exc:
        raise KernelStartError(
            f"could not join the Ray cluster at {where}: {_first_line(exc)}"
        ) from None
    return ray


async def _host_on(
    ray: Any, node_id: str, zygote: bool | None, timeout: float
) -> tuple[Any, dict[str, Any]]:
    """This process's host on the node (made and waited for on first use), and the node."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    from ._host import NodeHost

    key = (node_id, zygote)
    host = _HOSTS.get(key)
    if host is None:
        host = (
            ray.remote(NodeHost)
            .options(
                num_cpus=0,
                max_restarts=0,
                scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=False),
            )
            .remote(zygote=zygote)
        )
        _HOSTS[key] = host
    try:
        described = await asyncio.wait_for(_awaitable(host.describe.remote()), timeout)
    except BaseException:
        _HOSTS.pop(key, None)
        raise
    return host, {
        "node_id": node_id,
        "address": described.get("address"),
        "host_pid": described["pid"],
    }


def _visible_gpus() -> list[str]:
    """In a Ray task: the ids of the GPUs Ray gave it."""
    import ray

    return [str(gpu) for gpu in ray.get_gpu_ids()]


def _capacity(ray: Any) -> str:
    try:
        nodes = [n for n in ray.nodes() if n.get("Alive")]
        return "; ".join(
            ", ".join(f"{k}={v:g}" for k, v in sorted(n["Resources"].items()) if "node:" not in k)
            for n in nodes
        )
    except Exception:
        return "unknown"


def _awaitable(ref: Any) -> Any:
    """An ObjectRef as an asyncio future (it is awaitable, but not a coroutine)."""
    return asyncio.wrap_future(ref.future())


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
