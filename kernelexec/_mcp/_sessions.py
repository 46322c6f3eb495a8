"""The MCP server's own sessions, by name, each with a work dir under one root."""

from __future__ import annotations

import asyncio
import contextlib
import re
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

from .._remote_models import SessionInfo
from .._session import AsyncSession

__all__ = ["McpConfig", "SessionError", "Sessions"]

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")


class SessionError(Exception):
    """A tool call named a session that cannot be used; the message says what to do."""


@dataclass(frozen=True)
class McpConfig:
    """How ``kernelexec mcp`` runs its sessions.

    Attributes:
        work_root: each session's work dir is ``work_root/<name>``.
        timeout: default seconds per execution.
        max_timeout: the longest timeout a call may ask for.
        max_sessions: sessions at once; asking for another is refused.
        kernel_name: the kernelspec every session runs.
        inline_limit: images up to this many bytes come back inline; larger
            ones (and every other file) as resource links.
        max_file_bytes: the largest file a resource read returns; a larger
            one is refused with its path on this machine (a read holds the
            file, and its base64, in memory).
    """

    work_root: Path
    timeout: float = 60.0
    max_timeout: float = 600.0
    max_sessions: int = 8
    kernel_name: str = "python3"
    inline_limit: int = 64 * 1024
    max_file_bytes: int = 32 * 1024 * 1024


@dataclass
class _Entry:
    session: AsyncSession
    created: float = field(default_factory=time.time)
    last_activity: float = field(default_factory=time.time)
    executions: int = 0
    busy: int = 0


class Sessions:
    """Named sessions, made on first use and closed together."""

    def __init__(self, config: McpConfig) -> None:
        self.config = config
        self._entries: dict[str, _Entry] = {}

    def get(self, name: str, *, create: bool = False) -> AsyncSession:
        """The session called ``name``, made now if ``create``.

        Raises:
            SessionError: a bad name, no such session, or too many sessions.
        """
        if not _NAME.fullmatch(name):
            raise SessionError(
                f"bad session name {name!r}: use 1-64 letters, digits, '_', '-' or '.', "
                "starting with a letter or digit"
            )
        entry = self._entries.get(name)
        if entry is None:
            if not create:
                known = ", ".join(sorted(self._entries)) or "none yet"
                raise SessionError(
                    f"no session {name!r} (sessions: {known}); execute_code makes one"
                )
            if len(self._entries) >= self.config.max_sessions:
                raise SessionError(
                    f"already {len(self._entries)} sessions, the most allowed "
                    "(kernelexec mcp --max-sessions); reuse one of list_sessions"
                )
            session = AsyncSession(
                self.config.work_root / name,
                kernel_name=self.config.kernel_name,
                timeout=self.config.timeout,
            )
            entry = self._entries[name] = _Entry(session)
        entry.last_activity = time.time()
        return entry.session

    @contextlib.asynccontextmanager
    async def executing(self, name: str) -> AsyncIterator[AsyncSession]:
        """The session, counted as busy (and one execution more) meanwhile."""
        session = self.get(name, create=True)
        entry = self._entries[name]
        entry.busy += 1
        entry.executions += 1
        try:
            yield session
        finally:
            entry.busy -= 1
            entry.last_activity = time.time()

    def infos(self) -> list[dict[str, object]]:
        """Each session as the HTTP API describes one, plus its work dir."""
        return [
            SessionInfo(
                id=name,
                state="busy" if entry.busy else "idle",
                kernel_name=self.config.kernel_name,
                timeout=self.config.timeout,
                created=entry.created,
                last_activity=entry.last_activity,
                executions=entry.executions,
            ).to_dict()
            | {"work_dir": str(entry.session.work_dir)}
            for name, entry in sorted(self._entries.items())
        ]

    async def close(self) -> None:
        """Shuts every kernel down; work dirs and transcripts stay."""
        entries, self._entries = list(self._entries.values()), {}
        await asyncio.gather(*(e.session.close() for e in entries), return_exceptions=True)
