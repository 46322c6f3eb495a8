"""The values the HTTP API hands out besides ExecutionResult: sessions, files, checkpoints.

The server builds them and sends ``to_dict()``; the clients read them back with
``from_dict()``, so both sides share one definition of the wire format. What a
local session gives for the same data is the same type here too (a checkpoint's
``CheckpointVariable`` and ``SkippedVariable``), and every time is ISO 8601 text
in UTC (``_times``).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any, Literal

from ._state._manifest import CheckpointVariable, SkippedVariable

__all__ = ["CheckpointInfo", "FileInfo", "SessionInfo", "SessionState"]

SessionState = Literal["starting", "idle", "busy", "suspended", "culled", "lost"]


def _known(cls: type, data: dict[str, Any]) -> dict[str, Any]:
    # Unknown keys are skipped, so an older client reads a newer server.
    names = {f.name for f in fields(cls)}
    return {k: v for k, v in data.items() if k in names}


@dataclass(frozen=True)
class SessionInfo:
    """One session on a server.

    Attributes:
        id: the session's id (32 hex digits), part of every route about it.
        state: "starting", "idle", "busy" (executing or restarting),
            "suspended" (idle too long: checkpointed and kernel shut down; the
            next execution restores it) or "culled" (idle too long and could
            not be checkpointed, or the server culls: kernel shut down, files
            and transcript kept) or "lost" (the server restarted while it
            held a kernel: the kernel and its state are gone, files and
            transcript kept; its executions answer HTTP 410).
        kernel_name: the kernelspec the session runs.
        timeout: default seconds per execution.
        created: when it was created (ISO 8601, UTC: "2025-06-01T12:00:03.250Z").
        last_activity: when a request last used it (ISO 8601, UTC).
        executions: executions requested so far.
        sandbox: the containment of its kernel (``kernelexec.Sandbox`` as a
            dict), or None: uncontained (or not a local kernel).
        node: where its kernel runs on a Ray cluster (``serve --ray``):
            ``{"node_id", "address", "gpus", "pooled"}`` (the ids of the
            node's GPUs the session holds; whether its kernel was a ready one
            of the node's pool); None: not on a cluster (or not started).
    """

    id: str
    state: SessionState
    kernel_name: str
    timeout: float
    created: str
    last_activity: str
    executions: int = 0
    sandbox: dict[str, Any] | None = None
    node: dict[str, Any] | None = None

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
        modified: last modification (ISO 8601, UTC).
    """

    path: str
    size: int
    modified: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> FileInfo:
        return cls(**_known(cls, data))


@dataclass(frozen=True)
class CheckpointInfo:
    """A checkpoint in a server's checkpoint store (``POST /sessions/{id}/checkpoint``).

    Attributes:
        id: the checkpoint's id (32 hex digits): ``POST /sessions`` with
            ``{"checkpoint": id}`` makes a session from it.
        created: when it was made (ISO 8601, UTC).
        session: the id of the session it was made from, if known.
        suspend: made by the server when it suspended an idle session.
        python: the Python that made it ("cpython 3.11.7").
        variables: what it holds, as a local ``Checkpoint`` lists them (``file``
            and ``buffers_file`` are relative to the checkpoint's folder).
        modules: module aliases re-imported by name (``{"np": "numpy"}``).
        skipped: what it could not carry, and why.
        files: work-dir files it holds.
        size: bytes of variable data.
        packages: versions of the packages whose objects it holds.
    """

    id: str
    created: str
    session: str | None = None
    suspend: bool = False
    python: str = ""
    variables: list[CheckpointVariable] = field(default_factory=list)
    modules: dict[str, str] = field(default_factory=dict)
    skipped: list[SkippedVariable] = field(default_factory=list)
    files: int = 0
    size: int = 0
    packages: dict[str, str] = field(default_factory=dict)

    @property
    def text(self) -> str:
        """What it carries and what it does not, for an LLM or a person."""
        lines = [
            f"Checkpoint {self.id}: {len(self.variables)} variables ({self.size:,} bytes), "
            f"{len(self.modules)} modules, {self.files} files."
        ]
        if self.variables:
            lines.append("Variables: " + ", ".join(f"{v.name} ({v.type})" for v in self.variables))
        if self.modules:
            lines.append(
                "Modules: "
                + ", ".join(m if a == m else f"{m} as {a}" for a, m in self.modules.items())
            )
        if self.skipped:
            lines.append("Not carried:")
            lines.extend(f"- {s.name} ({s.type}): {s.reason}" for s in self.skipped)
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> CheckpointInfo:
        known = _known(cls, data)
        known["variables"] = [
            CheckpointVariable(
                v["name"], v["type"], v["size"], v.get("file", ""), v.get("buffers_file", "")
            )
            for v in known.get("variables", [])
        ]
        known["skipped"] = [
            SkippedVariable(s["name"], s["type"], s["reason"]) for s in known.get("skipped", [])
        ]
        return cls(**known)
