"""What the containment tests share: the host's plants, contained starts, attempts in a kernel.

A test plants what a contained kernel must not reach (``planted``), starts a
contained session each way a kernel comes to be (``start_as``), and runs code
in it that reports, as JSON, what each attempt raised (``attempt``).
"""

from __future__ import annotations

import contextlib
import json
import socket
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from conftest import warm_zygote

from kernelexec import AsyncSession, ExecutionResult, Session
from kernelexec._backends._local import LocalBackend
from kernelexec._containment._platform import support

__all__ = [
    "CONTAINABLE",
    "KINDS",
    "Host",
    "attempt",
    "attempt_async",
    "backend",
    "denied",
    "planted",
    "start_as",
]

# Each test module of the containment says ``pytestmark = CONTAINABLE``.
CONTAINABLE = pytest.mark.skipif(
    not support().ok, reason=f"this machine cannot contain a kernel: {support().why_not()}"
)

KINDS = ["spawned", "forked", "fork-copy", "restored"]


@dataclass
class Host:
    """What the host planted for the kernel to go after."""

    secret: Path  # in $HOME
    neighbour: Path  # another session's work dir, a file in it
    store: Path  # a checkpoint store, a file in it
    outside: Path  # a folder outside the work dir, a file in it
    port: int  # listening on 127.0.0.1
    sockets: list[str]  # Unix sockets listening in $HOME and the temp dir (an agent's, tmux's)


@contextlib.contextmanager
def planted(root: Path) -> Iterator[Host]:
    """Plants, in ``root`` and the home, what a kernel must not reach; removes it after."""
    secret = Path.home() / f".kernelexec-test-secret-{uuid.uuid4().hex}"
    secret.write_text("kx-home-secret")
    secret.chmod(0o600)
    for name in ("neighbour", "store", "outside"):
        (root / name).mkdir()
        (root / name / "file").write_text(f"kx-{name}-secret")
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    agents = []
    for folder in (Path.home(), root):
        path = folder / f".kx-agent-{uuid.uuid4().hex[:8]}"
        agent = socket.socket(socket.AF_UNIX)
        agent.bind(str(path))
        agent.listen(8)
        agents.append((agent, path))
    try:
        yield Host(
            secret,
            root / "neighbour",
            root / "store",
            root / "outside",
            listener.getsockname()[1],
            [str(path) for _, path in agents],
        )
    finally:
        listener.close()
        for agent, path in agents:
            agent.close()
            path.unlink()
        secret.unlink()


def start_as(kind: str, work: Path, **options: Any) -> tuple[Session, list[Session]]:
    """A contained session started as ``kind``; and the sessions to close after it."""
    sandbox = options.pop("sandbox", True)
    if kind == "forked":
        warm_zygote()
    if kind in ("spawned", "forked"):
        session = Session(work, sandbox=sandbox, timeout=60, **options).start()
        assert backend(session).forked is (kind == "forked")
        return session, [session]
    parent = Session(work.with_name(work.name + "-parent"), sandbox=sandbox, timeout=60).start()
    parent.execute("kept = 41")
    if kind == "fork-copy":
        child = parent.fork(work)
        assert child.fork_report is not None and child.fork_report.method == "checkpoint"
    else:
        saved = parent.checkpoint()
        child = Session.restore(saved, work, sandbox=sandbox, timeout=60)
    assert child.execute("print(kept + 1)").stdout.strip() == "42"
    return child, [child, parent]


def backend(session: Session) -> LocalBackend:
    """The session's local backend (its kernel's supervisor, ``forked``)."""
    backend = session._async._backend
    assert isinstance(backend, LocalBackend)
    return backend


def attempt(session: Session, code: str) -> Any:
    """Runs ``code`` (which sets ``found``) in the kernel; ``found``, as JSON."""
    return found_in(session.execute(attempt_source(code)))


async def attempt_async(session: AsyncSession, code: str) -> Any:
    """``attempt`` in an ``AsyncSession``."""
    return found_in(await session.execute(attempt_source(code)))


def attempt_source(code: str) -> str:
    """``code`` in a function whose ``tried(action, ...)`` says what an attempt raised."""
    body = "\n".join("    " + line for line in code.strip().splitlines())
    return f"""
import json, os
def _attempt():
    def tried(action, *args, **kwargs):
        try:
            value = action(*args, **kwargs)
        except BaseException as exc:  # noqa: BLE001
            return f"{{type(exc).__name__}}: {{exc}}"
        return ["ok", value if isinstance(value, (str, int, list, type(None))) else repr(value)]
{body}
    return found
print(json.dumps(_attempt()))
del _attempt
"""


def found_in(result: ExecutionResult) -> Any:
    """What ``attempt_source``'s code printed, read back."""
    assert result.status == "ok", result.text
    return json.loads(result.stdout.strip().splitlines()[-1])


def denied(outcome: Any) -> bool:
    """Whether an attempt failed as the containment fails it (not ``["ok", ...]``)."""
    return isinstance(outcome, str) and outcome.split(":")[0] in (
        "PermissionError",
        "OSError",
        "FileNotFoundError",
        "ProcessLookupError",
    )
