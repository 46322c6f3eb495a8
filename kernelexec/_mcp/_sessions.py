"""The MCP server's own sessions, by name, each with a work dir under one root."""

from __future__ import annotations

import asyncio
import contextlib
import re
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

from .._background import ExecutionStore
from .._exceptions import ConfigurationError, KernelStartError
from .._remote_models import SessionInfo
from .._server._options import SessionOptions, SessionPolicy
from .._session import AsyncSession
from .._times import iso

__all__ = ["McpConfig", "SessionError", "Sessions", "check_name"]

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")


class SessionError(Exception):
    """A tool call named a session that cannot be used; the message says what to do."""


def check_name(name: str) -> str:
    """``name`` if it may name a session.

    Raises:
        SessionError: it is not 1-64 letters, digits, '_', '-' or '.'.
    """
    if not _NAME.fullmatch(name):
        raise SessionError(
            f"bad session name {name[:80]!r}: use 1-64 letters, digits, '_', '-' or '.', "
            "starting with a letter or digit"
        )
    return name


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
        policy: the session options ``create_session`` may ask for.
    """

    work_root: Path
    timeout: float = 60.0
    max_timeout: float = 600.0
    max_sessions: int = 8
    kernel_name: str = "python3"
    inline_limit: int = 64 * 1024
    max_file_bytes: int = 32 * 1024 * 1024
    policy: SessionPolicy = field(default_factory=SessionPolicy)


@dataclass
class _Entry:
    session: AsyncSession
    options: SessionOptions
    created: float = field(default_factory=time.time)
    last_activity: float = field(default_factory=time.time)
    executions: int = 0
    busy: int = 0
    background: ExecutionStore = field(default_factory=ExecutionStore)


class Sessions:
    """Named sessions, made on first use (or by ``create``) and closed together."""

    def __init__(self, config: McpConfig) -> None:
        self.config = config
        self._entries: dict[str, _Entry] = {}

    def get(self, name: str, *, create: bool = False) -> AsyncSession:
        """The session called ``name``, made now (with no options) if ``create``.

        Raises:
            SessionError: a bad name, no such session, or too many sessions.
        """
        check_name(name)
        entry = self._entries.get(name)
        if entry is None:
            if not create:
                known = ", ".join(sorted(self._entries)) or "none yet"
                raise SessionError(
                    f"no session {name!r} (sessions: {known}); execute_code or "
                    "create_session makes one"
                )
            entry = self._add(name, SessionOptions())
        entry.last_activity = time.time()
        return entry.session

    async def create(
        self, name: str, options: SessionOptions, timeout: float | None = None
    ) -> AsyncSession:
        """A new session called ``name`` with ``options``, its kernel started.

        Raises:
            SessionError: the name is taken or bad, too many sessions, or the
                kernel could not start with these options (the message says why).
        """
        if check_name(name) in self._entries:
            raise SessionError(f"a session {name!r} exists; pick another name, or use it as it is")
        entry = self._add(name, options, timeout)
        try:
            await entry.session.start()
        except (ConfigurationError, KernelStartError) as exc:
            self._entries.pop(name, None)
            await entry.session.close()
            raise SessionError(f"session {name!r} could not start: {exc}") from None
        except BaseException:
            self._entries.pop(name, None)
            await entry.session.close()
            raise
        return entry.session

    def options(self, name: str) -> SessionOptions:
        """The options the session ``name`` was made with."""
        self.get(name)
        return self._entries[name].options

    def new_name(self, name: str | None, stem: str) -> str:
        """``name`` if free (and good), else the first free ``stem-N``; room checked.

        Raises:
            SessionError: the name is taken or bad, or there are too many sessions.
        """
        self._check_room()
        if name is not None:
            if check_name(name) in self._entries:
                raise SessionError(f"a session {name!r} exists; pick another name")
            return name
        stem = stem[:56]
        return next(f"{stem}-{n}" for n in range(1, 10_000) if f"{stem}-{n}" not in self._entries)

    def adopt(self, name: str, session: AsyncSession, options: SessionOptions) -> None:
        """Takes a started session (a fork, a restore) in under ``name``."""
        self._entries[check_name(name)] = _Entry(session, options)

    def _check_room(self) -> None:
        if len(self._entries) >= self.config.max_sessions:
            raise SessionError(
                f"already {len(self._entries)} sessions, the most allowed "
                "(kernelexec mcp --max-sessions); reuse one of list_sessions"
            )

    def _add(self, name: str, options: SessionOptions, timeout: float | None = None) -> _Entry:
        self._check_room()
        try:
            session = AsyncSession(
                self.config.work_root / name,
                kernel_name=self.config.kernel_name,
                timeout=timeout or self.config.timeout,
                **options.session_kwargs(self.config.policy, self.config.kernel_name),
            )
        except ConfigurationError as exc:
            raise SessionError(str(exc)) from None
        entry = self._entries[name] = _Entry(session, options)
        return entry

    def background(self, name: str) -> ExecutionStore:
        """The session's background executions (running, queued, the last finished)."""
        self.get(name)
        return self._entries[name].background

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
                timeout=entry.session.timeout,
                created=iso(entry.created),
                last_activity=iso(entry.last_activity),
                executions=entry.executions,
            ).to_dict()
            | {"options": entry.options.to_dict(), "work_dir": str(entry.session.work_dir)}
            for name, entry in sorted(self._entries.items())
        ]

    async def close(self) -> None:
        """Shuts every kernel down; work dirs and transcripts stay."""
        entries, self._entries = list(self._entries.values()), {}
        await asyncio.gather(*(e.session.close() for e in entries), return_exceptions=True)
