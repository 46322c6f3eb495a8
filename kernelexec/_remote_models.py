"""The values the HTTP API hands out besides ExecutionResult: sessions and files.

The server builds them and sends ``to_dict()``; the clients read them back with
``from_dict()``, so both sides share one definition of the wire format.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any, Literal

__all__ = ["FileInfo", "SessionInfo", "SessionState"]

SessionState = Literal["starting", "idle", "busy", "culled"]


def _known(cls: type, data: dict[str, Any]) -> dict[str, Any]:
    # Unknown keys are skipped, so an older client reads a newer server.
    names = {f.name for f in fields(cls)}
    return {k: v for k, v in data.items() if k in names}


@dataclass(frozen=True)
class SessionInfo:
    """One session on a server.

    Attributes:
        id: the session's id (32 hex digits), part of every route about it.
        state: "starting", "idle", "busy" (executing or restarting) or
            "culled" (idle too long: kernel shut down, files and transcript kept).
        kernel_name: the kernelspec the session runs.
        timeout: default seconds per execution.
        created: when it was created, Unix seconds.
        last_activity: when a request last used it, Unix seconds.
        executions: executions requested so far.
    """

    id: str
    state: SessionState
    kernel_name: str
    timeout: float
    created: float
    last_activity: float
    executions: int = 0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SessionInfo:
        return cls(**_known(cls, data))


@dataclass(frozen=True)
class FileInfo:
    """A file in a session's work dir.

    Attributes:
        path: relative to the work dir, with "/" separators.
        size: bytes.
        modified: last modification, Unix seconds.
    """

    path: str
    size: int
    modified: float

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> FileInfo:
        return cls(**_known(cls, data))
