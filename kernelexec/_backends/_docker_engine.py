"""The docker CLI, run as asyncio subprocesses.

The CLI rather than the Docker SDK: it is what users already have and debug
with, it honours their DOCKER_HOST and contexts, and it costs no dependency.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import sys
from collections.abc import Mapping
from dataclasses import dataclass

from .._exceptions import KernelStartError

__all__ = ["DockerReply", "docker", "engine_problem"]


@dataclass(frozen=True)
class DockerReply:
    """What one docker command did."""

    code: int
    stdout: str
    stderr: str

    @property
    def ok(self) -> bool:
        return self.code == 0


async def docker(
    *args: str,
    timeout: float = 120.0,
    show: bool = False,
    env: Mapping[str, str] | None = None,
) -> DockerReply:
    """Runs ``docker ARGS`` and returns its exit code and output.

    Args:
        args: the docker command's arguments.
        timeout: seconds it may take.
        show: pass its output through to this process's stderr as it comes,
            rather than capture it (for long builds).
        env: variables added to the docker command's environment: values for
            ``-e NAME`` options, which stay out of its world-readable command line.

    Raises:
        KernelStartError: there is no docker command, or it did not finish in time.
    """
    exe = shutil.which("docker")
    if exe is None:
        raise KernelStartError(
            "the docker command is not installed; install Docker (or docker.io) and start "
            "its engine, or use LocalBackend/GatewayBackend"
        )
    proc = await asyncio.create_subprocess_exec(
        exe,
        *args,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=sys.stderr.fileno() if show else asyncio.subprocess.PIPE,
        stderr=None if show else asyncio.subprocess.PIPE,
        env={**os.environ, **env} if env else None,
    )
    try:
        out, err = await asyncio.wait_for(proc.communicate(), timeout)
    except asyncio.TimeoutError as exc:
        proc.kill()
        await proc.wait()
        raise KernelStartError(
            f"`docker {args[0]}` did not finish within {timeout:g} s; "
            "is the Docker engine healthy (`docker info`)?"
        ) from exc
    return DockerReply(
        proc.returncode or 0,
        (out or b"").decode(errors="replace"),
        (err or b"").decode(errors="replace"),
    )


def engine_problem(reply: DockerReply) -> str | None:
    """A clear message if ``reply`` failed because the engine is unreachable."""
    text = reply.stderr
    if "Cannot connect to the Docker daemon" in text or "connect: no such file" in text:
        return (
            "the Docker engine is not running or not reachable (`docker info` fails); "
            "start it (e.g. `sudo systemctl start docker`) or check DOCKER_HOST"
        )
    if "permission denied" in text.lower() and "docker.sock" in text:
        return (
            "this user may not use the Docker engine (permission denied on docker.sock); "
            "add it to the docker group or use rootless Docker"
        )
    return None
