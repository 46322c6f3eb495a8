"""Entry: one session of the server, and what the server tracks about it."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .._execution._background import ExecutionStore
from .._ray import node_of
from .._remote_models import SessionInfo, SessionState
from .._session._async import AsyncSession
from .._state._fork import ForkReport
from .._state._manifest import RestoreReport
from .._tenants._config import DEFAULT_TENANT
from .._times import iso
from ._options import SessionOptions
from ._records import Record, RecordState

__all__ = ["Entry", "culled_text", "why_culled"]


@dataclass
class Entry:
    """One session and what the server tracks about it."""

    id: str
    session: AsyncSession
    kernel_name: str
    timeout: float
    options: SessionOptions = field(default_factory=SessionOptions)
    env: dict[str, str] = field(default_factory=dict)
    tenant: str = DEFAULT_TENANT  # whose session it is: only its tenant (and admins) see it
    created: float = field(default_factory=time.time)
    last_activity: float = field(default_factory=time.time)
    executions: int = 0
    busy: int = 0  # requests using the kernel now (executions, restarts)
    starting: bool = True
    culled: bool = False
    deleted: bool = False
    suspending: bool = False  # its state is being checkpointed, to suspend it
    suspend_id: str | None = None  # suspended: the checkpoint holding its state
    idle_for: float = 0.0  # seconds it was idle when suspended or culled
    why_culled: str | None = None  # culled though suspending was on: why
    lost: str | None = None  # its kernel was lost in a restart of the server: why
    quota_stop: str | None = None  # why its running executions were stopped (_quotas)
    resumed: RestoreReport | None = None  # for the next execution's result to tell
    fork_report: ForkReport | None = None
    restore_report: RestoreReport | None = None
    # Held while the session is suspended or woken: a request waits for either to end.
    lock: asyncio.Lock = field(default_factory=asyncio.Lock, repr=False)
    start_task: asyncio.Future[AsyncSession] | None = field(default=None, repr=False)
    # Its executions by id (kernelexec._server._executions): running ones, and the last finished.
    execution_store: ExecutionStore = field(default_factory=ExecutionStore, repr=False)

    @property
    def suspended(self) -> bool:
        return self.suspend_id is not None

    @property
    def state(self) -> SessionState:
        if self.lost is not None:
            return "lost"
        if self.culled:
            return "culled"
        if self.suspended or self.suspending:
            return "suspended"
        if self.starting:
            return "starting"
        return "busy" if self.busy else "idle"

    @property
    def work_dir(self) -> Path:
        return self.session.work_dir

    def info(self) -> SessionInfo:
        policy = self.session.sandbox
        return SessionInfo(
            self.id,
            self.state,
            self.kernel_name,
            self.timeout,
            iso(self.created),
            iso(self.last_activity),
            self.executions,
            None if policy is None else policy.to_dict(),
            node_of(self.session._backend),
        )

    def to_dict(self) -> dict[str, Any]:
        """The session as the API describes it: its info, and the options it was made with."""
        data = self.info().to_dict() | {"tenant": self.tenant, "options": self.options.to_dict()}
        if self.lost is not None:
            data["message"] = self.lost
        elif self.culled:
            data["message"] = culled_text(self)
        elif self.suspended:
            data["message"] = (
                f"suspended after {self.idle_for:.0f} s idle: its state is in checkpoint "
                f"{self.suspend_id}; the next execution restores it into a new kernel"
            )
        return data

    def touch(self) -> None:
        self.last_activity = time.time()

    def record(self) -> Record:
        """What the server keeps on disk about it (``_records``)."""
        state: RecordState = "culled" if self.culled else "suspended" if self.suspended else "live"
        return Record(
            self.id,
            state,
            self.kernel_name,
            self.timeout,
            self.created,
            env=dict(self.env),
            options=self.options.to_dict(),
            checkpoint=self.suspend_id,
            idle_for=self.idle_for,
            why_culled=self.why_culled,
            tenant=self.tenant,
        )


def culled_text(entry: Entry) -> str:
    return (
        f"session {entry.id} was idle over {entry.idle_for:.0f} s, so its kernel was shut "
        f"down{why_culled(entry.why_culled)} (its files and notebook can still be downloaded); "
        "create a new session"
    )


def why_culled(reason: str | None) -> str:
    return f" without a checkpoint, all state lost: {reason}" if reason else ""
