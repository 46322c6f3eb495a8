"""Where the MCP tools' sessions live: in this process, or on a ``kernelexec serve``.

The tools are written once against ``Door``. ``LocalDoor``
(``_local_door.py``) holds its own sessions (``kernelexec mcp``);
``RemoteDoor`` (``_remote_door.py``) speaks to a running server with
kernelexec's own HTTP client (``kernelexec mcp --server URL``), so an MCP
client and an HTTP client see, and use, the same sessions. Both refuse the
same things with the same two exceptions: ``SessionError`` (no such session,
an option refused) and ``FileRefused`` (a path that is no file of the work dir).
"""

from __future__ import annotations

from typing import Any, Protocol

from .._client._base import Made
from .._execution._models import ExecutionResult
from .._remote_models import CheckpointInfo
from .._state._fork import ForkMethod
from ._executions import ExecutionView

__all__ = ["CANCEL_WAIT", "Door", "describe_checkpoint", "describe_made"]

CANCEL_WAIT = 60.0  # seconds cancel_execution waits for the execution to end


class Door(Protocol):
    """What the MCP tools need of the sessions, wherever they run."""

    async def create(
        self, name: str, options: dict[str, Any], timeout: float | None
    ) -> dict[str, Any]:
        """Makes a session with these options (JSON, as ``POST /sessions`` takes them)."""
        ...

    async def execute(
        self, name: str, code: str, language: str, timeout: float | None
    ) -> ExecutionResult:
        """Runs code in the session, made first (with no options) if it does not exist."""
        ...

    async def start(
        self, name: str, code: str, language: str, timeout: float | None
    ) -> dict[str, Any]:
        """Starts code in the background (the session made first if need be); its description."""
        ...

    async def execution(
        self, name: str, execution_id: str, wait: float, offset: int
    ) -> ExecutionView:
        """A background execution: its events from ``offset``, after waiting up to ``wait`` s
        for its end."""
        ...

    async def cancel(self, name: str, execution_id: str) -> ExecutionView:
        """Cancels a background execution; answered once it has ended (or was already done)."""
        ...

    async def infos(self) -> list[dict[str, Any]]: ...

    async def restart(self, name: str) -> None: ...

    async def interrupt(self, name: str) -> None: ...

    async def files(self, name: str) -> dict[str, Any]:
        """The work dir's files as the HTTP API lists them."""
        ...

    async def read(
        self, name: str, path: str, limit: int, *, whole: bool = False
    ) -> tuple[bytes, int]:
        """At most ``limit`` bytes of a file and its size (``whole``: nothing if larger)."""
        ...

    async def notebook(self, name: str) -> tuple[bytes | None, str]:
        """The transcript's bytes (None before anything ran) and its path in the work dir."""
        ...

    async def where(self, name: str, path: str) -> str:
        """Where a person finds the whole file, for messages."""
        ...

    async def variables(self, name: str) -> list[dict[str, Any]]:
        """The session's variables, as ``GET /sessions/{id}/variables`` lists them."""
        ...

    async def inspect(self, name: str, variable: str) -> dict[str, Any] | None:
        """One variable in detail; None if the namespace has none such."""
        ...

    async def fork(
        self, name: str, new_name: str | None, method: ForkMethod = "auto"
    ) -> dict[str, Any]:
        """A new session with a copy of the session's live state and files; it and its report."""
        ...

    async def checkpoint(self, name: str) -> dict[str, Any]:
        """Checkpoints the session's state and files; the checkpoint as the HTTP API lists it."""
        ...

    async def restore(self, checkpoint: str, name: str | None) -> dict[str, Any]:
        """A new session from a checkpoint (by id); it and what came back."""
        ...

    async def close(self) -> None: ...


def describe_made(info: dict[str, Any], name: str, made: Made) -> dict[str, Any]:
    """A made session's description for a tool: its name, and how it was forked or restored."""
    if made.fork_report is not None:
        info["fork_report"] = made.fork_report.to_dict()
    if made.restore_report is not None:
        info["restore_report"] = made.restore_report.to_dict()
        info["restored"] = made.restore_report.text
    return info | {"name": name}


def describe_checkpoint(info: CheckpointInfo) -> dict[str, Any]:
    """A checkpoint as a tool shows it: the HTTP API's fields and its text."""
    return info.to_dict() | {"text": info.text}
