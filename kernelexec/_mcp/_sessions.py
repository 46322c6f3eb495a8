"""The MCP server's own sessions, by name, each with a work dir under one root."""

from __future__ import annotations

import asyncio
import contextlib
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .._exceptions import ConfigurationError, KernelStartError
from .._execution._background import ExecutionStore
from .._ray import node_of
from .._remote_models import SessionInfo
from .._server._options import SessionOptions, SessionPolicy
from .._session._async import AsyncSession
from .._times import iso
from ._making import Making

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
    """Named sessions, made on first use (or by ``create``) and closed together.

    A name is taken from the moment a call starts making its session (a
    create, a fork, a restore) and counts against ``max_sessions`` from then
    on; see ``_making``.
    """

    def __init__(self, config: McpConfig, server_room: Callable[[], None] | None = None) -> None:
        self.config = config
        self._entries: dict[str, _Entry] = {}
        self._making = Making()
        self._closed = False
        # Raises when the whole server is full, beyond these sessions (a tenant's among others').
        self._server_room = server_room

    @property
    def held(self) -> int:
        """Sessions held, counting those being made."""
        return len(self._entries) + len(self._making)

    def get(self, name: str, *, create: bool = False) -> AsyncSession:
        """The session called ``name``, made now (with no options) if ``create``.

        Raises:
            SessionError: a bad name, no such session (or one still being
                made), or too many sessions.
        """
        check_name(name)
        entry = self._entries.get(name)
        if entry is None:
            if name in self._making:
                raise SessionError(
                    f"session {name!r} is being made by another call; use it once that "
                    "call has answered"
                )
            if not create:
                known = ", ".join(sorted(self._entries)) or "none yet"
                raise SessionError(
                    f"no session {name!r} (sessions: {known}); execute_code or "
                    "create_session makes one"
                )
            entry = self._add(name)
        entry.last_activity = time.time()
        return entry.session

    async def ready(self, name: str, *, create: bool = False) -> AsyncSession:
        """``get``, once a session another call is making under ``name`` is made.

        Raises:
            SessionError: as ``get``; or that session could not be made.
        """
        if not await self._making.wait(check_name(name)):
            raise SessionError(
                f"session {name!r} could not be made (the call making it said why); make it again"
            )
        return self.get(name, create=create)

    async def create(
        self, name: str, options: SessionOptions, timeout: float | None = None
    ) -> AsyncSession:
        """A new session called ``name`` with ``options``, its kernel started.

        Raises:
            SessionError: the name is taken or bad, too many sessions, or the
                kernel could not start with these options (the message says why).
        """

        async def start(work_dir: Path) -> AsyncSession:
            session = self._session(work_dir, options, timeout)
            try:
                await session.start()
            except (ConfigurationError, KernelStartError) as exc:
                await session.close()
                raise SessionError(f"session {name!r} could not start: {exc}") from None
            except BaseException:
                await session.close()
                raise
            return session

        if check_name(name) in self._entries or name in self._making:
            raise SessionError(f"a session {name!r} exists; pick another name, or use it as it is")
        return (await self.make(name, "", start, options))[1]

    async def make(
        self,
        name: str | None,
        stem: str,
        work: Callable[[Path], Awaitable[AsyncSession]],
        options: SessionOptions,
    ) -> tuple[str, AsyncSession]:
        """The session ``work(work_dir)`` makes (a fork, a restore), under ``name``.

        The name (``name``, or else the first free ``stem-N``) and its room
        are taken before anything is made; see ``Making`` for a call that
        goes away meanwhile.

        Raises:
            SessionError: the name is taken or bad, or there are too many sessions.
        """
        self._check_room()
        if name is not None:
            if check_name(name) in self._entries or name in self._making:
                raise SessionError(f"a session {name!r} exists; pick another name")
        else:
            stem = stem[:56]
            name = next(
                f"{stem}-{n}"
                for n in range(1, 10_000)
                if f"{stem}-{n}" not in self._entries and f"{stem}-{n}" not in self._making
            )
        self._making.reserve(name)
        session = await self._making.make(
            name,
            work(self.config.work_root / name),
            lambda made: self._adopt(name, made, options),
            AsyncSession.close,
        )
        return name, session

    def options(self, name: str) -> SessionOptions:
        """The options the session ``name`` was made with."""
        self.get(name)
        return self._entries[name].options

    def _adopt(self, name: str, session: AsyncSession, options: SessionOptions) -> AsyncSession:
        if self._closed:
            raise SessionError("kernelexec mcp is stopping; the session was closed")
        self._entries[name] = _Entry(session, options)
        return session

    def _check_room(self) -> None:
        if self._server_room is not None:
            self._server_room()
        held = self.held
        if held >= self.config.max_sessions:
            raise SessionError(
                f"already {held} sessions (counting those being made), the most allowed "
                "(kernelexec mcp --max-sessions); reuse one of list_sessions"
            )

    def _session(
        self, work_dir: Path, options: SessionOptions, timeout: float | None = None
    ) -> AsyncSession:
        try:
            return AsyncSession(
                work_dir,
                kernel_name=self.config.kernel_name,
                timeout=timeout or self.config.timeout,
                **options.session_kwargs(self.config.policy, self.config.kernel_name),
            )
        except ConfigurationError as exc:
            raise SessionError(str(exc)) from None

    def _add(self, name: str) -> _Entry:
        """A session with no options, its kernel started by its first execution."""
        self._check_room()
        options = SessionOptions()
        session = self._session(self.config.work_root / name, options)
        entry = self._entries[name] = _Entry(session, options)
        return entry

    def background(self, name: str) -> ExecutionStore:
        """The session's background executions (running, queued, the last finished)."""
        self.get(name)
        return self._entries[name].background

    @contextlib.asynccontextmanager
    async def executing(self, name: str) -> AsyncIterator[AsyncSession]:
        """The session, counted as busy (and one execution more) meanwhile."""
        session = await self.ready(name, create=True)
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
                sandbox=_policy(entry.session),
                node=node_of(entry.session._backend),
            ).to_dict()
            | {"options": entry.options.to_dict(), "work_dir": str(entry.session.work_dir)}
            for name, entry in sorted(self._entries.items())
        ]

    async def close(self) -> None:
        """Shuts every kernel down, those being made too; work dirs and transcripts stay."""
        self._closed = True
        entries, self._entries = list(self._entries.values()), {}
        await asyncio.gather(*(e.session.close() for e in entries), return_exceptions=True)
        await self._making.close()


def _policy(session: AsyncSession) -> dict[str, Any] | None:
    """The containment in force for a session's kernel, as ``GET /sessions/{id}`` shows it."""
    policy = session.sandbox
    return None if policy is None else policy.to_dict()
