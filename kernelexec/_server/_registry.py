"""The server's sessions: created, looked up, culled when idle, closed at exit."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import secrets
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .._exceptions import ConfigurationError, KernelStartError, SessionClosedError
from .._pool import KernelPool
from .._remote_models import SessionInfo, SessionState
from .._session import AsyncSession
from .._workdir import remove_tree
from ._bodies import CreateRequest
from ._config import ServerConfig
from ._errors import ApiError
from ._options import SessionOptions

__all__ = ["Entry", "Registry"]

log = logging.getLogger("kernelexec.server")

_ID = re.compile(r"[0-9a-f]{32}")


@dataclass
class Entry:
    """One session and what the server tracks about it."""

    id: str
    session: AsyncSession
    kernel_name: str
    timeout: float
    options: SessionOptions = field(default_factory=SessionOptions)
    created: float = field(default_factory=time.time)
    last_activity: float = field(default_factory=time.time)
    executions: int = 0
    busy: int = 0  # requests using the kernel now (executions, restarts)
    starting: bool = True
    culled: bool = False
    deleted: bool = False
    start_task: asyncio.Future[AsyncSession] | None = field(default=None, repr=False)

    @property
    def state(self) -> SessionState:
        if self.culled:
            return "culled"
        if self.starting:
            return "starting"
        return "busy" if self.busy else "idle"

    @property
    def work_dir(self) -> Path:
        return self.session.work_dir

    def info(self) -> SessionInfo:
        return SessionInfo(
            self.id,
            self.state,
            self.kernel_name,
            self.timeout,
            self.created,
            self.last_activity,
            self.executions,
        )

    def to_dict(self) -> dict[str, Any]:
        """The session as the API describes it: its info, and the options it was made with."""
        return self.info().to_dict() | {"options": self.options.to_dict()}

    def touch(self) -> None:
        self.last_activity = time.time()


class Registry:
    """Every session of one server, keyed by a random id.

    A session's id is 128 random bits in hex; it names its work dir under the
    work root, and anything else is refused before it reaches the file system.
    """

    def __init__(self, config: ServerConfig) -> None:
        self.config = config
        self.root = config.work_root.expanduser().resolve()
        self._entries: dict[str, Entry] = {}
        self._closing = False
        self.pool: KernelPool | None = None

    def start_pool(self) -> None:
        """Starts filling the warm kernel pool, if the config asks for one."""
        if self.config.pool_size and self.pool is None:
            self.pool = KernelPool(self.config.pool_size, preload=self.config.preload).start()

    @property
    def closing(self) -> bool:
        return self._closing

    def _live(self) -> int:
        return sum(not e.culled for e in self._entries.values())

    async def create(self, request: CreateRequest) -> Entry:
        """Starts a session's kernel; HTTP 429 past ``max_sessions``."""
        self._refuse_if_closing()
        if self._live() >= self.config.max_sessions:
            raise ApiError(
                429,
                "too_many_sessions",
                f"the server already runs "
                f"{self.config.max_sessions} sessions (its --max-sessions); delete one "
                "(DELETE /sessions/{id}) or wait for idle ones to be culled",
            )
        session_id = secrets.token_hex(16)
        options = request.options
        kwargs: dict[str, Any] = {"preload": self.config.preload}
        kwargs |= options.session_kwargs(self.config.policy, request.kernel_name)
        if options.local:
            kwargs["pool"] = self.pool  # a container or a gateway is no pool's kernel
        try:
            session = AsyncSession(
                self.root / session_id,
                kernel_name=request.kernel_name,
                env=request.env,
                timeout=request.timeout,
                **kwargs,
            )
        except ConfigurationError as exc:
            raise ApiError(503, "work_root_unusable", str(exc)) from None
        entry = Entry(session_id, session, request.kernel_name, request.timeout, options)
        self._entries[session_id] = entry  # counted against the limit while it starts
        # A task of its own, so that a DELETE meanwhile can wait for the start
        # to end before it shuts the kernel down: closing a session in the
        # middle of its start could leave a kernel nobody owns.
        entry.start_task = start = asyncio.ensure_future(session.start())
        try:
            await asyncio.shield(start)
        except BaseException as exc:
            # Cancelled (the creator went away) or failed: the kernel is closed
            # once its start has ended, never while it is half made.
            await asyncio.wait([start])
            if not start.cancelled():
                start.exception()  # retrieved here, reported below
            if not entry.deleted:  # else the DELETE closes it
                self._entries.pop(session_id, None)
                await session.close()
            if entry.deleted and isinstance(exc, Exception):
                pass  # deleted meanwhile: what the creator needs to know is the 409 below
            elif isinstance(exc, ConfigurationError):
                # The client's options could not be honoured: a Python version
                # not found, a package that failed to install (pip's words in it).
                raise ApiError(422, "invalid_option", str(exc)) from None
            elif (
                isinstance(exc, KernelStartError)
                and options.preload is not None
                and ("preload" in str(exc))
            ):
                raise ApiError(422, "invalid_option", f"{exc} (the session's preload)") from None
            elif isinstance(exc, KernelStartError):
                raise ApiError(503, "kernel_start_failed", str(exc)) from None
            else:
                raise
        finally:
            entry.starting = False
        if entry.deleted:
            raise ApiError(
                409,
                "session_deleted",
                f"session {session_id} was deleted (DELETE /sessions/{{id}}) while its "
                "kernel was starting; create a new session",
            )
        entry.touch()
        return entry

    def get(self, session_id: str) -> Entry:
        """The session, culled or not; HTTP 404 for an unknown or malformed id."""
        entry = self._entries.get(session_id) if _ID.fullmatch(session_id) else None
        if entry is None:
            raise ApiError(
                404,
                "session_not_found",
                f"no session {session_id[:64]!r} on this "
                "server; it may have been deleted (GET /sessions lists them)",
            )
        return entry

    def get_live(self, session_id: str) -> Entry:
        """The session, which must still have a kernel; HTTP 409 once culled."""
        entry = self.get(session_id)
        self._refuse_if_closing()
        if entry.culled:
            raise ApiError(
                409,
                "session_culled",
                f"session {session_id} was idle over "
                f"{self.config.idle_timeout or 0:g} s, so its kernel was shut down "
                "(its files and notebook can still be downloaded); create a new "
                "session",
            )
        if entry.session.closed:
            raise ApiError(
                409,
                "session_closed",
                f"session {session_id} is being deleted; create a new session",
            )
        return entry

    def entries(self) -> list[Entry]:
        return sorted(self._entries.values(), key=lambda e: e.created)

    def acquire(self, session_id: str) -> Entry:
        """The live session, marked busy (never culled) until ``release``."""
        entry = self.get_live(session_id)
        entry.busy += 1
        entry.touch()
        return entry

    def release(self, entry: Entry) -> None:
        entry.busy -= 1
        entry.touch()

    @contextlib.asynccontextmanager
    async def using(self, session_id: str) -> AsyncIterator[Entry]:
        """The live session, marked busy for the block."""
        entry = self.acquire(session_id)
        try:
            yield entry
        finally:
            self.release(entry)

    async def interrupt(self, session_id: str) -> Entry:
        """Interrupts what the session's kernel runs; HTTP 409 if it closed meanwhile."""
        entry = self.get_live(session_id)
        entry.touch()
        try:
            await entry.session.interrupt()
        except SessionClosedError:
            raise _closed_meanwhile() from None
        return entry

    async def restart(self, session_id: str) -> Entry:
        """Replaces the session's kernel, as its transcript records; 409 or 503 if it cannot."""
        async with self.using(session_id) as entry:
            try:
                await entry.session.restart()
            except SessionClosedError:
                raise _closed_meanwhile() from None
            except KernelStartError as exc:
                raise ApiError(503, "kernel_start_failed", str(exc)) from None
        return entry

    async def delete(self, session_id: str, *, purge: bool) -> Entry:
        """Shuts the session's kernel down and forgets it; its files stay unless ``purge``.

        A session still starting is forgotten at once (its creator is told
        with a 409) and shut down as soon as its start ends.
        """
        entry = self.get(session_id)
        del self._entries[session_id]
        entry.deleted = True
        if entry.start_task is not None and not entry.start_task.done():
            await asyncio.wait([entry.start_task])
            if not entry.start_task.cancelled():
                entry.start_task.exception()  # retrieved: the creator reports it
        await entry.session.close()
        if purge:
            await asyncio.to_thread(remove_tree, entry.work_dir)
        return entry

    async def cull_idle(self) -> list[str]:
        """Shuts down the kernels of sessions idle past the idle timeout; their ids."""
        if self.config.idle_timeout is None:
            return []
        deadline = time.time() - self.config.idle_timeout
        idle = [
            e
            for e in self._entries.values()
            if not (e.culled or e.starting or e.busy) and e.last_activity < deadline
        ]
        for entry in idle:
            entry.culled = True  # before the await: no request can start using it now
        await asyncio.gather(*(e.session.close() for e in idle), return_exceptions=True)
        for entry in idle:
            log.info("culled session %s after %g s idle", entry.id, self.config.idle_timeout)
        return [e.id for e in idle]

    async def cull_forever(self) -> None:
        """Culls idle sessions every few seconds until cancelled."""
        if self.config.idle_timeout is None:
            return
        period = min(max(self.config.idle_timeout / 4, 0.2), 10.0)
        while True:
            await asyncio.sleep(period)
            await self.cull_idle()

    async def close_all(self) -> None:
        """Refuses new work, interrupts running executions and shuts every kernel down.

        Closing a session interrupts what it runs, gives queued executions a
        "cancelled" result and flushes its transcript; safe to call twice.
        """
        self._closing = True
        sessions = [e.session for e in self._entries.values() if not e.session.closed]
        await asyncio.gather(*(s.close() for s in sessions), return_exceptions=True)
        if self.pool is not None:
            await self.pool.close()

    def _refuse_if_closing(self) -> None:
        if self._closing:
            raise ApiError(
                503,
                "shutting_down",
                "the server is shutting down; start it again and create a new session",
            )


def _closed_meanwhile() -> ApiError:
    return ApiError(409, "session_closed", "the session was closed meanwhile")
