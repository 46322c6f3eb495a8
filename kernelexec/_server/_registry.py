"""The server's sessions: created, forked, looked up, suspended when idle, closed at exit.

A session idle past the idle timeout is suspended (``_suspend``): its
variables are checkpointed into the server's checkpoint store and its kernel
shut down; the next request that needs a kernel restores them into a new one
in the same work dir first. One that cannot be checkpointed is culled, as every
idle session is with ``suspend`` off: its kernel is shut down and its state lost.
"""

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

from .._background import ExecutionStore
from .._checkpoint import Checkpoint, RestoreReport
from .._exceptions import (
    CheckpointError,
    ConfigurationError,
    IncompatibleCheckpointError,
    KernelStartError,
    SessionBusyError,
    SessionClosedError,
)
from .._fork import ForkReport
from .._pool import KernelPool
from .._remote_models import CheckpointInfo, SessionInfo, SessionState
from .._session import AsyncSession
from .._times import iso
from .._workdir import remove_tree
from ._bodies import CreateRequest
from ._checkpoints import CheckpointStore, UnknownCheckpoint
from ._config import ServerConfig
from ._errors import ApiError
from ._options import SessionOptions

__all__ = ["Entry", "Registry"]

log = logging.getLogger("kernelexec.server")

_ID = re.compile(r"[0-9a-f]{32}")
CHECKPOINT_TIMEOUT = 300.0  # seconds a checkpoint (or a restore) may take in the kernel
VARIABLE_TIMEOUT = 30.0  # seconds one variable may take to pickle or load


@dataclass
class Entry:
    """One session and what the server tracks about it."""

    id: str
    session: AsyncSession
    kernel_name: str
    timeout: float
    options: SessionOptions = field(default_factory=SessionOptions)
    env: dict[str, str] = field(default_factory=dict)
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
        return SessionInfo(
            self.id,
            self.state,
            self.kernel_name,
            self.timeout,
            iso(self.created),
            iso(self.last_activity),
            self.executions,
        )

    def to_dict(self) -> dict[str, Any]:
        """The session as the API describes it: its info, and the options it was made with."""
        data = self.info().to_dict() | {"options": self.options.to_dict()}
        if self.culled:
            data["message"] = _culled_text(self)
        elif self.suspended:
            data["message"] = (
                f"suspended after {self.idle_for:.0f} s idle: its state is in checkpoint "
                f"{self.suspend_id}; the next execution restores it into a new kernel"
            )
        return data

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
        self.store = CheckpointStore(self.root)
        self._entries: dict[str, Entry] = {}
        self._closing = False
        self._reserved = 0  # kernels being made for forks and resumes
        self._tasks: set[asyncio.Task[None]] = set()  # suspends under way
        self.pool: KernelPool | None = None

    def start_pool(self) -> None:
        """Starts filling the warm kernel pool, if the config asks for one."""
        if self.config.pool_size and self.pool is None:
            self.pool = KernelPool(self.config.pool_size, preload=self.config.preload).start()

    @property
    def closing(self) -> bool:
        return self._closing

    def _live(self) -> int:
        """Sessions holding a kernel (or about to): culled and suspended ones hold none."""
        held = sum(not (e.culled or e.suspended) for e in self._entries.values())
        return held + self._reserved

    def _check_room(self, what: str = "") -> None:
        if self._live() >= self.config.max_sessions:
            raise ApiError(
                429,
                "too_many_sessions",
                f"the server already runs {self.config.max_sessions} sessions (its "
                f"--max-sessions){what}; delete one (DELETE /sessions/{{id}}) or wait for "
                "idle ones to be suspended",
            )

    def _kwargs(
        self, kernel_name: str, env: dict[str, str], timeout: float, options: SessionOptions
    ) -> dict[str, Any]:
        """``AsyncSession``'s arguments for a session with these settings (a new backend)."""
        kwargs: dict[str, Any] = {"preload": self.config.preload}
        kwargs |= options.session_kwargs(self.config.policy, kernel_name)
        if options.local:
            kwargs["pool"] = self.pool  # a container or a gateway is no pool's kernel
        return {"kernel_name": kernel_name, "env": env, "timeout": timeout, **kwargs}

    async def create(self, request: CreateRequest) -> Entry:
        """Starts a session's kernel (restoring a checkpoint into it if asked); HTTP 429
        past ``max_sessions``, 404 for an unknown checkpoint, 422 for a damaged one."""
        self._refuse_if_closing()
        # A bad checkpoint is refused before any kernel starts.
        saved = self.open_checkpoint(request.checkpoint) if request.checkpoint else None
        self._check_room()
        session_id = secrets.token_hex(16)
        options = request.options
        settings = (request.kernel_name, request.env, request.timeout, options)
        try:
            session = AsyncSession(self.root / session_id, **self._kwargs(*settings))
        except ConfigurationError as exc:
            raise ApiError(503, "work_root_unusable", str(exc)) from None
        entry = Entry(
            session_id, session, request.kernel_name, request.timeout, options, dict(request.env)
        )
        self._entries[session_id] = entry  # counted against the limit while it starts

        async def start() -> AsyncSession:
            if saved is None:
                return await session.start()
            restored = await _restore(saved, entry.work_dir, self._kwargs(*settings))
            entry.session = restored  # before anything else: a DELETE closes this one
            entry.restore_report = _with_id(restored.restore_report, request.checkpoint)
            return restored

        # A task of its own, so that a DELETE meanwhile can wait for the start
        # to end before it shuts the kernel down: closing a session in the
        # middle of its start could leave a kernel nobody owns.
        entry.start_task = start_task = asyncio.ensure_future(start())
        try:
            await asyncio.shield(start_task)
        except BaseException as exc:
            # Cancelled (the creator went away) or failed: the kernel is closed
            # once its start has ended, never while it is half made.
            await asyncio.wait([start_task])
            if not start_task.cancelled():
                start_task.exception()  # retrieved here, reported below
            if not entry.deleted:  # else the DELETE closes it
                self._entries.pop(session_id, None)
                await entry.session.close()
            if entry.deleted and isinstance(exc, Exception):
                pass  # deleted meanwhile: what the creator needs to know is the 409 below
            elif isinstance(exc, CheckpointError):
                raise _restore_refused(exc) from None
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
        """The session, which must have a kernel or be suspended; HTTP 409 once culled."""
        entry = self.get(session_id)
        self._refuse_if_closing()
        if entry.culled:
            raise ApiError(409, "session_culled", _culled_text(entry))
        if entry.session.closed and not (entry.suspended or entry.suspending):
            raise ApiError(
                409,
                "session_closed",
                f"session {session_id} is being deleted; create a new session",
            )
        return entry

    def entries(self) -> list[Entry]:
        return sorted(self._entries.values(), key=lambda e: e.created)

    async def acquire(self, session_id: str) -> Entry:
        """The live session, marked busy (never suspended) until ``release``.

        A session being suspended is waited for; a suspended one is restored
        into a new kernel first (``Entry.resumed`` says what came back).
        """
        entry = self.get_live(session_id)
        entry.busy += 1
        entry.touch()
        try:
            async with entry.lock:  # a suspend under way ends first
                if entry.culled:
                    raise ApiError(409, "session_culled", _culled_text(entry))
                if entry.deleted:
                    raise _closed_meanwhile()
                if entry.suspended:
                    await self._resume(entry)
        except BaseException:
            self.release(entry)
            raise
        return entry

    def release(self, entry: Entry) -> None:
        entry.busy -= 1
        entry.touch()

    @contextlib.asynccontextmanager
    async def using(self, session_id: str) -> AsyncIterator[Entry]:
        """The live session, marked busy for the block (restored first if suspended)."""
        entry = await self.acquire(session_id)
        try:
            yield entry
        finally:
            self.release(entry)

    async def interrupt(self, session_id: str) -> Entry:
        """Interrupts what the session's kernel runs; HTTP 409 if it closed meanwhile."""
        entry = self.get_live(session_id)
        entry.touch()
        if entry.suspended or entry.suspending:
            return entry  # nothing of the session's runs; its checkpoint is left to finish
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

    async def fork(self, session_id: str, *, wait: bool) -> Entry:
        """A new session holding a copy of the session's state; counted as any session.

        HTTP 409 ``session_busy`` when it is executing and ``wait`` is false.
        """
        async with self.using(session_id) as parent:
            self._check_room("; a fork is a session too")
            child_id = secrets.token_hex(16)
            self._reserved += 1
            try:
                child = await parent.session.fork(self.root / child_id, wait=wait)
            except SessionBusyError:
                raise ApiError(
                    409,
                    "session_busy",
                    f"session {session_id} is running an execution; fork with "
                    '{"wait": true} to fork it when the execution ends',
                ) from None
            except SessionClosedError:
                raise _closed_meanwhile() from None
            except CheckpointError as exc:
                raise ApiError(409, "checkpoint_failed", f"cannot fork: {exc}") from None
            except (KernelStartError, ConfigurationError) as exc:
                raise ApiError(503, "kernel_start_failed", f"cannot fork: {exc}") from None
            finally:
                self._reserved -= 1
            if self._closing:
                await child.close()
                self._refuse_if_closing()
            entry = Entry(
                child_id,
                child,
                parent.kernel_name,
                parent.timeout,
                parent.options,
                dict(parent.env),
                starting=False,
                fork_report=child.fork_report,
            )
            self._entries[child_id] = entry
        return entry

    async def checkpoint(self, session_id: str, *, files: bool) -> CheckpointInfo:
        """Checkpoints the session's state (and files) into the store; HTTP 409 if it cannot."""
        async with self.using(session_id) as entry:
            checkpoint_id, saved = await self._checkpoint(entry, files=files)
        return self.store.describe(checkpoint_id, saved)

    async def _checkpoint(self, entry: Entry, *, files: bool) -> tuple[str, Checkpoint]:
        try:
            checkpoint_id, path = await asyncio.to_thread(self.store.new)
        except CheckpointError as exc:
            raise ApiError(503, "checkpoint_store_unusable", str(exc)) from None
        try:
            await entry.session.checkpoint(
                path, files=files, timeout=CHECKPOINT_TIMEOUT, variable_timeout=VARIABLE_TIMEOUT
            )
            self.store.done(checkpoint_id)
            # Read back through the store, no link followed: it is where it should be.
            saved = await asyncio.to_thread(self.store.open, checkpoint_id)
        except BaseException as exc:
            self.store.done(checkpoint_id)
            await asyncio.to_thread(self.store.remove, checkpoint_id)
            if isinstance(exc, SessionClosedError):
                raise _closed_meanwhile() from None
            if isinstance(exc, (CheckpointError, UnknownCheckpoint)):
                raise ApiError(
                    409, "checkpoint_failed", f"the session's state could not be saved: {exc}"
                ) from None
            raise
        return checkpoint_id, saved

    def open_checkpoint(self, checkpoint_id: str) -> Checkpoint:
        """A checkpoint of the store; HTTP 404 if unknown, 422 if damaged."""
        try:
            return self.store.open(checkpoint_id)
        except UnknownCheckpoint:
            raise _no_checkpoint(checkpoint_id) from None
        except CheckpointError as exc:
            raise ApiError(422, "checkpoint_damaged", str(exc)) from None

    async def delete_checkpoint(self, checkpoint_id: str) -> None:
        """Removes a checkpoint; 404 if unknown, 409 if it holds a suspended session."""
        try:
            self.store.path(checkpoint_id)
        except UnknownCheckpoint:
            raise _no_checkpoint(checkpoint_id) from None
        owner = self.store.suspends.get(checkpoint_id)
        if owner is not None or checkpoint_id in self.store.making:
            why = (
                f"it holds the state of suspended session {owner}; delete that session instead"
                if owner
                else "it is being made"
            )
            raise ApiError(409, "checkpoint_in_use", f"checkpoint {checkpoint_id}: {why}")
        await asyncio.to_thread(self.store.remove, checkpoint_id)

    async def delete(self, session_id: str, *, purge: bool) -> Entry:
        """Shuts the session's kernel down and forgets it; its files stay unless ``purge``.

        A session still starting is forgotten at once (its creator is told
        with a 409) and shut down as soon as its start ends. A suspended
        session's checkpoint is removed with it.
        """
        entry = self.get(session_id)
        del self._entries[session_id]
        entry.deleted = True
        if entry.start_task is not None and not entry.start_task.done():
            await asyncio.wait([entry.start_task])
            if not entry.start_task.cancelled():
                entry.start_task.exception()  # retrieved: the creator reports it
        await entry.session.close()  # a checkpoint under way for a suspend fails at once
        async with entry.lock:  # a resume under way ends first (and closes what it made)
            await entry.session.close()
            if entry.suspend_id is not None:
                self.store.suspends.pop(entry.suspend_id, None)
                await asyncio.to_thread(self.store.remove, entry.suspend_id)
                entry.suspend_id = None
        if purge:
            await asyncio.to_thread(remove_tree, entry.work_dir)
        return entry

    async def cull_idle(self) -> list[str]:
        """Suspends (or culls) the sessions idle past the idle timeout; their ids.

        Each runs as a task of its own, so a slow checkpoint holds up no other.
        """
        if self.config.idle_timeout is None or self._closing:
            return []
        deadline = time.time() - self.config.idle_timeout
        idle = [
            e
            for e in self._entries.values()
            if not (e.culled or e.suspended or e.suspending or e.starting or e.busy)
            and e.last_activity < deadline
        ]
        for entry in idle:
            entry.suspending = True  # before the await: its state says so at once
            task = asyncio.get_running_loop().create_task(self._suspend(entry))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        return [e.id for e in idle]

    async def cull_forever(self) -> None:
        """Suspends (or culls) idle sessions every few seconds until cancelled."""
        if self.config.idle_timeout is None:
            return
        period = min(max(self.config.idle_timeout / 4, 0.2), 10.0)
        while True:
            await asyncio.sleep(period)
            await self.cull_idle()

    async def _suspend(self, entry: Entry) -> None:
        """Checkpoints an idle session and shuts its kernel down; culls it if that fails."""
        try:
            async with entry.lock:
                if entry.busy or entry.deleted or self._closing or entry.session.closed:
                    return  # used (or going) since it was found idle
                entry.idle_for = time.time() - entry.last_activity
                if not self.config.suspend:
                    await self._cull(entry, None)
                    return
                try:
                    checkpoint_id, _ = await self._checkpoint(entry, files=False)
                except ApiError as exc:
                    if not (entry.busy or entry.deleted or self._closing):
                        await self._cull(entry, exc.message)
                    return
                if entry.busy or entry.deleted or self._closing:
                    # A request came while the state was saved: it runs on this kernel.
                    await asyncio.to_thread(self.store.remove, checkpoint_id)
                    return
                entry.suspend_id = checkpoint_id
                self.store.suspends[checkpoint_id] = entry.id
                await entry.session.close()
                log.info(
                    "suspended session %s after %.0f s idle (checkpoint %s)",
                    entry.id,
                    entry.idle_for,
                    checkpoint_id,
                )
        finally:
            entry.suspending = False

    async def _cull(self, entry: Entry, why: str | None) -> None:
        entry.culled, entry.why_culled = True, why
        await entry.session.close()
        log.info("culled session %s after %.0f s idle%s", entry.id, entry.idle_for, _why(why))

    async def _resume(self, entry: Entry) -> None:
        """Restores a suspended session into a new kernel in its work dir; the lock is held.

        A checkpoint that cannot be restored leaves a new, empty kernel, and
        the report says why. HTTP 429 at ``max_sessions``, 503 if no kernel
        starts: the session stays suspended.
        """
        assert entry.suspend_id is not None
        self._refuse_if_closing()
        self._check_room("; a suspended session needs a kernel of its own to resume")
        settings = (entry.kernel_name, entry.env, entry.timeout, entry.options)
        self._reserved += 1
        try:
            try:
                saved = await asyncio.to_thread(self.store.open, entry.suspend_id)
                session = await _restore(saved, entry.work_dir, self._kwargs(*settings))
                report = _with_id(session.restore_report, entry.suspend_id)
            except (CheckpointError, UnknownCheckpoint) as exc:
                session = AsyncSession(entry.work_dir, **self._kwargs(*settings))
                try:
                    await session.start()
                except BaseException:
                    await session.close()
                    raise
                report = RestoreReport(
                    checkpoint=entry.suspend_id,
                    message=f"Its state could not be restored ({exc}); the new kernel "
                    "started empty.",
                )
        except KernelStartError as exc:
            raise ApiError(503, "kernel_start_failed", f"cannot resume: {exc}") from None
        except ConfigurationError as exc:
            raise ApiError(503, "kernel_start_failed", f"cannot resume: {exc}") from None
        finally:
            self._reserved -= 1
        if entry.deleted or self._closing:
            await session.close()
            raise _closed_meanwhile()
        entry.session, entry.resumed = session, report
        self.store.suspends.pop(entry.suspend_id, None)
        await asyncio.to_thread(self.store.remove, entry.suspend_id)
        entry.suspend_id = None
        log.info("resumed session %s", entry.id)

    async def close_all(self) -> None:
        """Refuses new work, interrupts running executions and shuts every kernel down.

        Closing a session interrupts what it runs, gives queued executions a
        "cancelled" result and flushes its transcript; a suspend under way
        fails at once and its half-made checkpoint is removed. Safe to call twice.
        """
        self._closing = True
        sessions = [e.session for e in self._entries.values() if not e.session.closed]
        await asyncio.gather(*(s.close() for s in sessions), return_exceptions=True)
        await asyncio.gather(*list(self._tasks), return_exceptions=True)
        if self.pool is not None:
            await self.pool.close()

    def _refuse_if_closing(self) -> None:
        if self._closing:
            raise ApiError(
                503,
                "shutting_down",
                "the server is shutting down; start it again and create a new session",
            )


async def _restore(saved: Checkpoint, work_dir: Path, kwargs: dict[str, Any]) -> AsyncSession:
    """A new session in ``work_dir`` with the checkpoint restored into its kernel."""
    return await AsyncSession.restore(
        saved,
        work_dir,
        load_timeout=CHECKPOINT_TIMEOUT,
        variable_timeout=VARIABLE_TIMEOUT,
        **kwargs,
    )


def _with_id(report: RestoreReport | None, checkpoint_id: str | None) -> RestoreReport:
    """The report naming the checkpoint by its id, not its path on the server."""
    assert report is not None and checkpoint_id is not None
    return RestoreReport(
        checkpoint=checkpoint_id,
        restored=report.restored,
        modules=report.modules,
        skipped=report.skipped,
        files=report.files,
        message=report.message,
    )


def _no_checkpoint(checkpoint_id: str) -> ApiError:
    return ApiError(
        404,
        "checkpoint_not_found",
        f"no checkpoint {str(checkpoint_id)[:64]!r} on this server (GET /checkpoints lists them)",
    )


def _restore_refused(exc: CheckpointError) -> ApiError:
    if isinstance(exc, IncompatibleCheckpointError):
        return ApiError(409, "checkpoint_incompatible", str(exc))
    return ApiError(422, "restore_failed", f"the checkpoint could not be restored: {exc}")


def _culled_text(entry: Entry) -> str:
    return (
        f"session {entry.id} was idle over {entry.idle_for:.0f} s, so its kernel was shut "
        f"down{_why(entry.why_culled)} (its files and notebook can still be downloaded); "
        "create a new session"
    )


def _why(reason: str | None) -> str:
    return f" without a checkpoint, all state lost: {reason}" if reason else ""


def _closed_meanwhile() -> ApiError:
    return ApiError(409, "session_closed", "the session was closed meanwhile")
