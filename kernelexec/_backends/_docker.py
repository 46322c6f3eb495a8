"""Kernels in Docker containers, spoken to over ZMQ ipc sockets in a mounted dir.

Transport: the kernel binds its five ZMQ sockets as Unix sockets in a private
host directory that is mounted into the container at the same path, and this
process connects to them with jupyter_client, exactly as to a local kernel.
No TCP port is published, so ``network="none"`` works (a published port needs
a network), there is no port to clash or to expose to other local users, and
the message loop is LocalBackend's. The cost: host and container must share a
kernel (Linux; not Docker Desktop's VM), which a bind mount of a socket needs.

The kernel runs through kernelexec's boot script (mounted read-only), under
tini as PID 1: ``docker kill --signal SIGINT`` reaches tini, which passes the
interrupt to the kernel's process group. A ``docker wait`` per container tells
at once when the container ends; ``docker inspect`` then says how (OOMKilled,
exit code).
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import json
import os
import secrets
import shutil
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from jupyter_client.session import Session

from .._environment import remote_env
from .._exceptions import ConfigurationError, KernelStartError
from .._kernel import BOOT_DIR
from .._venvs._venv import check_packages
from ._caps import read_tail
from ._docker_engine import docker, engine_problem
from ._image import build_image, image_tag, last_built_tag
from ._local import LocalBackend
from ._local_process import describe_exit

__all__ = ["DockerBackend", "cleanup_containers", "owner_label"]

LABEL = "kernelexec"
OWNER_LABEL = "kernelexec.owner"
_BOOT_DIR_IN_CONTAINER = "/opt/kernelexec"
_BOOT_IN_CONTAINER = f"{_BOOT_DIR_IN_CONTAINER}/boot.py"
_PYTHON_IN_CONTAINER = "/opt/venv/bin/python"
_LIVE: set[DockerBackend] = set()  # removed at interpreter exit if still running
_LOG_TAIL = 4000  # bytes of a failed container's log a start-up error quotes


class DockerBackend(LocalBackend):
    """A kernel in a Docker container, with the session's work dir at /workspace.

    The container runs as this process's uid and gid (so the files the kernel
    writes are this user's) with every capability dropped, carries the labels
    ``kernelexec=1`` and ``kernelexec.owner=<pid>:<start time>``, and is
    removed on shutdown, at this process's exit, or by ``kernelexec cleanup``
    after a crash.

    Args:
        image: the kernel image's tag (``kernelexec image build`` prints it);
            default, the image ``kernelexec image build`` built (or found
            built) last, whatever its options, else the one it makes with
            default inputs.
        packages: requirements to pip install into the image: the backend
            builds it on its first start, as ``kernelexec image build
            --packages`` would, or finds it built (its tag is a hash of the
            inputs). Not with ``image=``.
        requirements: a requirements file (pip's ``-r`` format) for the image,
            likewise; its content is part of the tag.
        base_image: the image to build on (default python:3.12-slim), likewise.
        memory: memory limit, e.g. "512m" (swap is not allowed beyond it).
        cpus: CPU limit, e.g. 1.5.
        pids_limit: most processes and threads in the container.
        network: "none" (no network at all), "bridge", or a network's name.
        env: variables for the kernel, on top of the session's ``env=``.
        volumes: more ``docker run -v`` specs, e.g. "/data:/data:ro".
        gpus: ``docker run --gpus`` value, e.g. "all".
        startup_timeout: seconds the kernel gets to answer.
    """

    forks_as_process = False

    def __init__(
        self,
        *,
        image: str | None = None,
        packages: Sequence[str] | None = None,
        requirements: str | Path | None = None,
        base_image: str | None = None,
        memory: str | None = None,
        cpus: float | None = None,
        pids_limit: int | None = None,
        network: str = "none",
        env: Mapping[str, str] | None = None,
        volumes: Sequence[str] = (),
        gpus: str | None = None,
        startup_timeout: float = 60.0,
    ) -> None:
        # What fresh() makes another of; taken first, before any local is added.
        self._given = {k: v for k, v in locals().items() if k not in ("self", "__class__")}
        super().__init__(startup_timeout=startup_timeout)
        if isinstance(volumes, str):
            raise ConfigurationError("volumes= takes a list of docker -v specs, not one string")
        builds = packages is not None or requirements is not None or base_image is not None
        if image is not None and builds:
            raise ConfigurationError(
                "give DockerBackend image= (an image built already) or packages=, "
                "requirements=, base_image= (to build one), not both"
            )
        self.image = image
        self.packages = check_packages(packages or ())
        self.requirements = _requirements_file(requirements)
        self.base_image = base_image
        self._builds = builds
        self.memory = memory
        self.cpus = cpus
        self.pids_limit = pids_limit
        self.network = network
        self.extra_env = dict(env or {})
        self.volumes = tuple(volumes)
        self.gpus = gpus
        self.container: str | None = None
        self._waiter: asyncio.subprocess.Process | None = None
        self._ended: str | None = None
        # Kept here: the kernel removes its connection file once it has read it.
        self._info: dict[str, Any] | None = None

    def fresh(self) -> DockerBackend:
        """A new, unstarted backend with the same settings (a session's fork, restored)."""
        return type(self)(**self._given)

    def __repr__(self) -> str:
        return f"<DockerBackend image={self.image} container={self.container}>"

    async def start(self, *, cwd: Path, env: dict[str, str]) -> None:
        if self.container is not None or self._ipc_dir is not None:
            await self.shutdown()  # a dead kernel's container and IPC dir (auto_restart=False)
        self._cwd, self._env = cwd, env
        self._ended = None
        image = self.image or await self._default_image()
        await self._check_image(image)
        self._ipc_dir = Path(tempfile.mkdtemp(prefix="kx-", dir="/tmp"))
        connection_file = self._write_connection_file(self._ipc_dir)
        name = f"kernelexec-{secrets.token_hex(6)}"
        reply = await docker(
            "run",
            "-d",
            "--name",
            name,
            *self._run_options(cwd, env),
            image,
            _PYTHON_IN_CONTAINER,
            _BOOT_IN_CONTAINER,
            "-f",
            str(connection_file),
            env=self._container_env(env),
        )
        if not reply.ok:
            self._remove_ipc_dir()
            raise KernelStartError(
                engine_problem(reply) or f"docker run {image} failed: {reply.stderr.strip()}"
            )
        self.container = name
        _LIVE.add(self)
        try:
            self._waiter = await asyncio.create_subprocess_exec(
                shutil.which("docker") or "docker",
                "wait",
                name,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.DEVNULL,
                stderr=asyncio.subprocess.DEVNULL,
            )
            self._connect()
            await self._wait_ready()
        except BaseException:
            await self.shutdown()
            raise

    async def interrupt(self) -> None:
        if self.container is not None and await self.is_alive():
            await docker("kill", "--signal", "SIGINT", self.container)

    async def restart(self) -> None:
        await self.shutdown()
        await self.start(cwd=self._cwd, env=self._env)

    async def shutdown(self, *, now: bool = False) -> None:
        channels, self._channels = self._channels, None
        if channels is not None:
            channels.close()
        container, self.container = self.container, None
        _LIVE.discard(self)
        if container is not None:
            with contextlib.suppress(KernelStartError):
                await docker("rm", "-f", container, timeout=30)
        waiter, self._waiter = self._waiter, None
        if waiter is not None and waiter.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                waiter.kill()
            await waiter.wait()
        self._remove_ipc_dir()

    async def is_alive(self) -> bool:
        if self.container is None or self._waiter is None:
            return False
        if self._waiter.returncode is None:
            return True
        if self._ended is None:
            self._ended = await self._how_it_ended()
        return False

    def exit_reason(self) -> str | None:
        return self._ended

    @property
    def pid(self) -> int | None:
        """None: the kernel runs in the container, not under this host's process tree
        (the ``docker`` client's process is not it)."""
        return None

    def connection_info(self) -> dict[str, Any] | None:
        """The kernel's connection file: ipc sockets a client on this host can use too."""
        if self._ipc_dir is None or self.container is None or self._info is None:
            return None
        return dict(self._info)

    # -- internals

    async def _default_image(self) -> str:
        if self._builds:
            # Quiet: a failure's message carries the build output's tail. Not
            # marked as the last built: DockerBackend() keeps running the
            # image `kernelexec image build` made.
            return await build_image(
                base_image=self.base_image,
                packages=self.packages,
                requirements=self.requirements,
                quiet=True,
                mark_last=False,
            )
        # The build's options (--base-image, --packages, ...) are in the tag's
        # hash, so the image just built is found by the tag the build moves.
        for candidate in (last_built_tag(), image_tag()):
            if (await docker("image", "inspect", "--format", "{{.Id}}", candidate)).ok:
                return candidate
        return image_tag()  # absent: _check_image says how to build it

    async def _check_image(self, image: str) -> None:
        reply = await docker("image", "inspect", "--format", "{{.Id}}", image)
        if reply.ok:
            return
        problem = engine_problem(reply)
        if problem:
            raise KernelStartError(problem)
        how = "`kernelexec image build`"
        if self.image is not None:
            how += f" (then pass its tag as image=), or `docker pull {image}`"
        raise KernelStartError(
            f"the Docker image {image!r} is not on this engine; build it with {how}"
        )

    def _run_options(self, cwd: Path, env: dict[str, str]) -> list[str]:
        assert self._ipc_dir is not None
        options = [
            "--label",
            f"{LABEL}=1",
            "--label",
            f"{OWNER_LABEL}={owner_label()}",
            "--user",
            f"{os.getuid()}:{os.getgid()}",
            "--cap-drop",
            "ALL",
            "--security-opt",
            "no-new-privileges",
            "--network",
            self.network,
            "-v",
            f"{cwd}:/workspace",
            "-v",
            f"{self._ipc_dir}:{self._ipc_dir}",
            "-v",
            f"{BOOT_DIR}:{_BOOT_DIR_IN_CONTAINER}:ro",
            "-w",
            "/workspace",
        ]
        if self.memory:
            options += ["--memory", self.memory, "--memory-swap", self.memory]
        if self.cpus:
            options += ["--cpus", f"{self.cpus:g}"]
        if self.pids_limit:
            options += ["--pids-limit", str(self.pids_limit)]
        if self.gpus:
            options += ["--gpus", self.gpus]
        for volume in self.volumes:
            options += ["-v", volume]
        # Names only: docker reads the values from its own environment, since
        # a value in a command line (a key passed on purpose) is world-readable.
        for key in self._container_env(env):
            options += ["-e", key]
        return options

    def _container_env(self, env: dict[str, str]) -> dict[str, str]:
        # HOME must be writable for IPython and matplotlib whatever uid runs.
        return {"HOME": "/tmp", **remote_env(env), **self.extra_env}

    def _write_connection_file(self, directory: Path) -> Path:
        # ipc transport: each channel is the Unix socket "<ip>-<port>".
        info = {
            "transport": "ipc",
            "ip": str(directory / "k"),
            "shell_port": 1,
            "iopub_port": 2,
            "stdin_port": 3,
            "control_port": 4,
            "hb_port": 5,
            "key": secrets.token_hex(32),
            "signature_scheme": "hmac-sha256",
            "kernel_name": "kernelexec-docker",
        }
        path = directory / "kernel.json"
        path.write_text(json.dumps(info))
        path.chmod(0o600)
        self._info = info
        return path

    def _connect(self) -> None:
        info = self._info
        assert info is not None, "_write_connection_file first"
        session = Session(key=info["key"].encode(), signature_scheme=info["signature_scheme"])
        self._channels = self._sockets(info, session)

    async def _how_it_ended(self) -> str:
        if self.container is None:
            return "the container is gone"
        reply = await docker("inspect", "--format", "{{json .State}}", self.container)
        try:
            state: dict[str, Any] = json.loads(reply.stdout)
        except ValueError:
            return "the container is gone"
        if state.get("OOMKilled"):
            limit = f" (memory={self.memory})" if self.memory else ""
            return f"out of memory: the container hit its memory limit{limit}"
        code = int(state.get("ExitCode") or 0)
        return (describe_exit(-(code - 128)) if code > 128 else describe_exit(code)) or "?"

    def _start_failure(self) -> str:
        logs = ""
        if self.container is not None:
            # Through a file, of which only the tail is read: the lines are the
            # kernel's, as long as it made them.
            with tempfile.TemporaryFile() as out:
                subprocess.run(
                    ["docker", "logs", "--tail", "30", self.container],
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    timeout=30,
                    check=False,
                )
                logs = read_tail(out, _LOG_TAIL).decode("utf-8", "replace").strip()
        return f"the kernel container exited during start-up ({self._ended or 'cause unknown'})" + (
            f"; it said:\n{logs}" if logs else ""
        )


def _requirements_file(requirements: str | Path | None) -> Path | None:
    if requirements is None:
        return None
    if not isinstance(requirements, (str, os.PathLike)):
        raise ConfigurationError(
            f"requirements= takes a requirements file's path, not {type(requirements).__name__}"
        )
    path = Path(requirements).expanduser().absolute()
    if not path.is_file():
        raise ConfigurationError(
            f"requirements={str(requirements)!r}: no such file ({path}); give the path of a "
            "requirements file, or the packages themselves as packages=[...]"
        )
    return path


def owner_label() -> str:
    """This process as "<pid>:<start time>", which a reused pid cannot match."""
    return f"{os.getpid()}:{_start_time(os.getpid())}"


def _start_time(pid: int) -> str:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return ""
    return stat.rsplit(")", 1)[1].split()[19]


def _owner_alive(label: str) -> bool:
    pid, _, started = label.partition(":")
    if not pid.isdigit():
        return False
    return _start_time(int(pid)) == started != ""


async def cleanup_containers(*, everything: bool = False) -> list[str]:
    """Removes kernelexec's containers whose owner process is gone; returns their names.

    Args:
        everything: remove every kernelexec container, owner alive or not.
    """
    reply = await docker(
        "ps",
        "-a",
        "--filter",
        f"label={LABEL}=1",
        "--format",
        f'{{{{.Names}}}}\t{{{{.Label "{OWNER_LABEL}"}}}}',
    )
    if not reply.ok:
        raise KernelStartError(engine_problem(reply) or f"docker ps failed: {reply.stderr}")
    doomed = [
        name
        for name, _, owner in (line.partition("\t") for line in reply.stdout.splitlines())
        if name and (everything or not _owner_alive(owner))
    ]
    if doomed:
        await docker("rm", "-f", *doomed, timeout=60)
    return doomed


@atexit.register
def _remove_leftover_containers() -> None:
    names = [b.container for b in list(_LIVE) if b.container is not None]
    if names:
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            subprocess.run(
                ["docker", "rm", "-f", *names], capture_output=True, timeout=30, check=False
            )
    for backend in list(_LIVE):
        backend._remove_ipc_dir()
