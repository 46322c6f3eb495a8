"""The server's sessions: created, forked, checkpointed, looked up, closed at exit.

The routes (``_routes.py``, ``_jupyter_api.py``) reach every session through
a ``Registry``. Idle sessions are suspended, culled and resumed by
``_idle.py``; checkpoints are made into the store by ``_checkpointing.py``.
Each session has a record on disk (``_records.py``), so a restarted server
lists its sessions again (``_recovery.py``): suspended ones resume on their
next execution, live ones are "lost" (HTTP 410, saying why) rather than unknown.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
import secrets
from collections.abc import AsyncIterator
from typing import Any

from .. import _workdir
from .._exceptions import (
    CheckpointError,
    ConfigurationError,
    DiskSpaceError,
    KernelStartError,
    SessionBusyError,
    SessionClosedError,
)
from .._execution._background import ExecutionStore
from .._remote_models import CheckpointInfo
from .._session._async import AsyncSession
from .._session._pool import KernelPool
from .._state import _disk
from .._state._fork import ForkMethod
from .._state._manifest import Checkpoint
from .._tenants._models import Tenant
from .._tenants._registry import TenantRegistry
from .._workdir import remove_tree
from ._access import unknown_session
from ._bodies import CreateRequest
from ._checkpointing import (
    checkpoint,
    delete_checkpoint,
    make_checkpoint,
    no_checkpoint,
    open_checkpoint,
    restore_refused,
)
from ._checkpoints import CheckpointStore
from ._config import ServerConfig
from ._entry import Entry, culled_text
from ._errors import ApiError, closed_meanwhile, no_room
from ._idle import (
    cull_idle,
    expire_checkpoints,
    housekeep_forever,
    restore_into,
    resume,
    with_id,
)
from ._options import SessionOptions
from ._quotas import QuotaKeeper
from ._records import Records, records_key
from ._recovery import recover

__all__ = ["Entry", "Registry"]

log = logging.getLogger("kernelexec.server")

_ID = re.compile(r"[0-9a-f]{32}")
KEEP_FINISHED = 16  # finished executions a session keeps (each with its events, capped)


class Registry:
    """Every session of one server, keyed by a random id.

    A session's id is 128 random bits in hex; it names its work dir under the
    work root, and anything else is refused before it reaches the file system.
    """

    def __init__(self, config: ServerConfig, tenants: TenantRegistry | None = None) -> None:
        self.config = config
        self.root = config.work_root.expanduser().resolve()
        self.store = CheckpointStore(self.root)
        if config.token is not None:
            secret = config.token
        else:
            self.root.mkdir(parents=True, exist_ok=True)
            secret = records_key(self.root)
        self.records = Records(self.root, secret)
        if tenants is None:
            assert config.token is not None  # ServerConfig: one or the other
            tenants = TenantRegistry.single(config.token)
        self.tenants = tenants
        self.quotas = QuotaKeeper(self, tenants)
        self._owners: dict[str, str | None] = {}  # checkpoint id -> its tenant, as read
        self._entries: dict[str, Entry] = {}
        self._closing = False
        self.reserved = 0  # kernels being made for forks and resumes
        self.tasks: set[asyncio.Task[None]] = set()  # suspends under way
        self.pool: KernelPool | None = None

    def start_pool(self) -> None:
        """Starts filling the warm kernel pool, if the config asks for one."""
        if self.config.pool_size and self.pool is None:
            self.pool = KernelPool(
                self.config.pool_size,
                preload=self.config.preload,
                sandbox=self.config.policy.sandbox,
                work_root=self.root,
            ).start()

    @property
    def closing(self) -> bool:
        return self._closing

    def _live(self) -> int:
        """Sessions holding a kernel (or about to): culled, suspended and lost ones hold none."""
        held = sum(not (e.culled or e.suspended or e.lost) for e in self._entries.values())
        return held + self.reserved

    def check_room(self, what: str = "") -> None:
        if self._live() >= self.config.max_sessions:
            raise ApiError(
                429,
                "too_many_sessions",
                f"the server already runs {self.config.max_sessions} sessions (its "
                f"--max-sessions){what}; delete one (DELETE /sessions/{{id}}) or wait for "
                "idle ones to be suspended",
            )

    def session_kwargs(
        self, kernel_name: str, env: dict[str, str], timeout: float, options: SessionOptions
    ) -> dict[str, Any]:
        """``AsyncSession``'s arguments for a session with these settings (a new backend)."""
        kwargs: dict[str, Any] = {"preload": self.config.preload}
        kwargs |= options.session_kwargs(self.config.policy, kernel_name)
        if options.local:
            kwargs["pool"] = self.pool  # a container or a gateway is no pool's kernel
        return {"kernel_name": kernel_name, "env": env, "timeout": timeout, **kwargs}

    async def create(self, request: CreateRequest, owner: Tenant) -> Entry:
        """Starts a session of ``owner``'s kernel (restoring a checkpoint into it if asked);
        HTTP 429 past ``max_sessions`` or the tenant's quota, 404 for an unknown checkpoint
        (or another tenant's), 422 for a damaged one."""
        self.refuse_if_closing()
        # A bad checkpoint is refused before any kernel starts.
        saved = None
        if request.checkpoint:
            if not self.owned(request.checkpoint, owner):
                raise no_checkpoint(request.checkpoint)
            saved = self.open_checkpoint(request.checkpoint)
        self.check_room()
        self.quotas.check_live(owner)
        session_id = secrets.token_hex(16)
        options = request.options
        settings = (request.kernel_name, request.env, request.timeout, options)
        try:
            session = AsyncSession(self.root / session_id, **self.session_kwargs(*settings))
        except ConfigurationError as exc:
            raise ApiError(503, "work_root_unusable", str(exc)) from None
        entry = Entry(
            session_id,
            session,
            request.kernel_name,
            request.timeout,
            options,
            dict(request.env),
            tenant=owner.name,
        )
        self.register(entry)  # counted against the limit while it starts

        async def start() -> AsyncSession:
            if saved is None:
                return await session.start()
            restored = await restore_into(saved, entry.work_dir, self.session_kwargs(*settings))
            entry.session = restored  # before anything else: a DELETE closes this one
            entry.restore_report = with_id(restored.restore_report, request.checkpoint)
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
            elif isinstance(exc, DiskSpaceError):
                raise no_room(f"cannot restore the checkpoint: {exc}") from None
            elif isinstance(exc, CheckpointError):
                raise restore_refused(exc) from None
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
            # Idle from the end of its start, not from its creation: a start
            # longer than --idle-timeout made the culler take it at once.
            entry.touch()
            entry.starting = False
        if entry.deleted:
            raise ApiError(
                409,
                "session_deleted",
                f"session {session_id} was deleted (DELETE /sessions/{{id}}) while its "
                "kernel was starting; create a new session",
            )
        try:
            await asyncio.to_thread(self.records.write, entry.record())
        except OSError as exc:
            # A session the server could not find again after a restart is not made.
            self._entries.pop(session_id, None)
            await entry.session.close()
            if _disk.is_full(exc):
                raise no_room(f"cannot record the new session: {_disk.full(exc, 'it')}") from None
            raise ApiError(503, "work_root_unusable", f"cannot record the session: {exc}") from None
        entry.touch()
        return entry

    async def save(self, entry: Entry) -> bool:
        """Rewrites the session's record; False (logged) if it cannot be written."""
        try:
            await asyncio.to_thread(self.records.write, entry.record())
        except OSError as exc:
            log.warning("cannot write the record of session %s: %s", entry.id, exc)
            return False
        return True

    def register(self, entry: Entry) -> None:
        """Lists the session, its execution queue bounded by the server's caps."""
        entry.execution_store = ExecutionStore(
            KEEP_FINISHED,
            max_queued=self.config.max_queued,
            max_queued_code=self.config.max_queued_bytes,
            named="the server's --max-queued and --max-queued-mb",
            unit="bytes",
        )
        self._entries[entry.id] = entry

    def lookup(self, session_id: str) -> Entry | None:
        """The session by id, or None."""
        return self._entries.get(session_id)

    async def cull_idle(self) -> list[str]:
        """Suspends (or culls) the sessions idle past the idle timeout; their ids."""
        return await cull_idle(self)

    async def housekeep_forever(self) -> None:
        """Suspends idle sessions and applies the store's age policy, until cancelled."""
        await housekeep_forever(self)

    async def expire_checkpoints(self) -> list[str]:
        """Removes the checkpoints older than the age policy; their ids."""
        return await expire_checkpoints(self)

    def get(self, session_id: str) -> Entry:
        """The session, culled or not; HTTP 404 for an unknown or malformed id."""
        entry = self._entries.get(session_id) if _ID.fullmatch(session_id) else None
        if entry is None:
            raise unknown_session(session_id)
        return entry

    # -- whose things are whose (the routes check with ``_access``)

    def checkpoint_owner(self, checkpoint_id: str) -> str | None:
        """The tenant a checkpoint of the store belongs to (None: none known)."""
        if checkpoint_id not in self._owners:
            self._owners[checkpoint_id] = self.records.owner(checkpoint_id)
        return self._owners[checkpoint_id]

    def owned(self, checkpoint_id: str, tenant: Tenant) -> bool:
        """Whether ``tenant`` may see the checkpoint: its own, or any for an admin."""
        return tenant.can("admin") or self.checkpoint_owner(checkpoint_id) == tenant.name

    def set_checkpoint_owner(self, checkpoint_id: str, tenant: str) -> None:
        """Records whose a new checkpoint is (a write: call it in a thread)."""
        self.records.write_owner(checkpoint_id, tenant)
        self._owners[checkpoint_id] = tenant

    def remove_checkpoint(self, checkpoint_id: str) -> None:
        """Removes a checkpoint from the store, and the record of whose it was (a thread's)."""
        self.store.remove(checkpoint_id)
        self._owners.pop(checkpoint_id, None)
        self.records.remove_owner(checkpoint_id)

    def unknown_checkpoint(self, checkpoint_id: str) -> ApiError:
        return no_checkpoint(checkpoint_id)

    async def forget_suspend(self, entry: Entry) -> None:
        """Removes the checkpoint that held a suspended session's state, if any."""
        if entry.suspend_id is not None:
            self.store.suspends.pop(entry.suspend_id, None)
            await asyncio.to_thread(self.remove_checkpoint, entry.suspend_id)
            entry.suspend_id = None

    def get_live(self, session_id: str) -> Entry:
        """The session, which must have a kernel or be suspended; HTTP 409 once culled,
        410 once lost in a restart."""
        entry = self.get(session_id)
        self.refuse_if_closing()
        if entry.lost is not None:
            raise ApiError(410, "session_lost", f"session {entry.id}: {entry.lost}")
        if entry.culled:
            raise ApiError(409, "session_culled", culled_text(entry))
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
                    raise ApiError(409, "session_culled", culled_text(entry))
                if entry.deleted:
                    raise closed_meanwhile()
                if entry.suspended:
                    owner = self.quotas.tenant(entry.tenant)
                    if owner is not None:
                        self.quotas.check_live(owner, " (resuming this one would make one more)")
                    await resume(self, entry)
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

    async def interrupt(self, session_id: str, *, kernel_wide: bool = False) -> Entry:
        """Interrupts what the session's kernel runs; HTTP 409 if it closed meanwhile.

        ``kernel_wide``: whatever the kernel runs, now (the Jupyter API's, a
        person's); else the session's execution, as it begins if it has not
        (``AsyncSession.interrupt``).
        """
        entry = self.get_live(session_id)
        entry.touch()
        if entry.suspended or entry.suspending:
            return entry  # nothing of the session's runs; its checkpoint is left to finish
        try:
            if kernel_wide:
                await entry.session._interrupt_kernel()
            else:
                await entry.session.interrupt()
        except SessionClosedError:
            raise closed_meanwhile() from None
        return entry

    async def restart(self, session_id: str) -> Entry:
        """Replaces the session's kernel, as its transcript records; 409 or 503 if it cannot."""
        async with self.using(session_id) as entry:
            try:
                await entry.session.restart()
            except SessionClosedError:
                raise closed_meanwhile() from None
            except KernelStartError as exc:
                raise ApiError(503, "kernel_start_failed", str(exc)) from None
        return entry

    async def fork(
        self, session_id: str, owner: Tenant, *, wait: bool, method: ForkMethod = "auto"
    ) -> Entry:
        """A new session holding a copy of the session's state; counted as any session.

        HTTP 409 ``session_busy`` when it is executing and ``wait`` is false;
        400 for ``method="process"`` of a kernel that cannot be forked so.
        """
        async with self.using(session_id) as parent:
            self.check_room("; a fork is a session too")
            self.quotas.check_live(owner, "; a fork is a session too")
            child_id = secrets.token_hex(16)
            self.reserved += 1
            try:
                child = await parent.session.fork(
                    self.root / child_id,
                    wait=wait,
                    method=method,
                    max_bytes=self.config.session_disk,
                )
            except DiskSpaceError as exc:
                await asyncio.to_thread(self._remove_work_dir, child_id)
                raise no_room(
                    f"cannot fork: {exc} (this server lets a fork copy "
                    f"{_disk.shown(self.config.session_disk)} of files: --session-disk-mb)"
                ) from None
            except SessionBusyError:
                raise ApiError(
                    409,
                    "session_busy",
                    f"session {session_id} is running an execution; fork with "
                    '{"wait": true} to fork it when the execution ends',
                ) from None
            except SessionClosedError:
                raise closed_meanwhile() from None
            except CheckpointError as exc:
                raise ApiError(409, "checkpoint_failed", f"cannot fork: {exc}") from None
            except ConfigurationError as exc:
                raise ApiError(400, "invalid_request", f"cannot fork: {exc}") from None
            except KernelStartError as exc:
                raise ApiError(503, "kernel_start_failed", f"cannot fork: {exc}") from None
            finally:
                self.reserved -= 1
            if self._closing:
                await child.close()
                self.refuse_if_closing()
            entry = Entry(
                child_id,
                child,
                parent.kernel_name,
                parent.timeout,
                parent.options,
                dict(parent.env),
                tenant=parent.tenant,
                starting=False,
                fork_report=child.fork_report,
            )
            self.register(entry)
            await self.save(entry)
        return entry

    def _remove_work_dir(self, session_id: str) -> None:
        """Removes the work dir of a session this server just failed to make (no link followed)."""
        try:
            root = _workdir.open_folder(self.root, [])
        except OSError:
            return
        try:
            _workdir.remove_in(root, session_id)
        finally:
            os.close(root)

    async def checkpoint(self, session_id: str, *, files: bool) -> CheckpointInfo:
        """Checkpoints the session's state (and files) into the store (``_checkpointing``)."""
        return await checkpoint(self, session_id, files=files)

    async def make_checkpoint(self, entry: Entry, *, files: bool) -> tuple[str, Checkpoint]:
        """A new checkpoint of the session in the store, within its budgets."""
        return await make_checkpoint(self, entry, files=files)

    def open_checkpoint(self, checkpoint_id: str) -> Checkpoint:
        """A checkpoint of the store; HTTP 404 if unknown, 422 if damaged."""
        return open_checkpoint(self, checkpoint_id)

    async def delete_checkpoint(self, checkpoint_id: str) -> None:
        """Removes a checkpoint; 404 if unknown, 409 if it holds a suspended session."""
        await delete_checkpoint(self, checkpoint_id)

    async def delete(self, session_id: str, *, purge: bool) -> Entry:
        """Shuts the session's kernel down and forgets it; its files stay unless ``purge``.

        A session still starting is forgotten at once (its creator is told
        with a 409) and shut down as soon as its start ends. A suspended
        session's checkpoint is removed with it, and so is its record.
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
            await asyncio.to_thread(self.records.remove, entry.id)
            await self.forget_suspend(entry)
        if purge:
            await asyncio.to_thread(remove_tree, entry.work_dir)
        return entry

    async def recover(self) -> None:
        """At start: sweeps what a crash left, and lists the sessions the records name."""
        await recover(self)

    async def close_all(self) -> None:
        """Refuses new work, interrupts running executions and shuts every kernel down.

        Closing a session interrupts what it runs, gives queued executions a
        "cancelled" result and flushes its transcript; a suspend under way
        fails at once and its half-made checkpoint is removed. Safe to call twice.
        """
        self._closing = True
        sessions = [e.session for e in self._entries.values() if not e.session.closed]
        await asyncio.gather(*(s.close() for s in sessions), return_exceptions=True)
        await asyncio.gather(*list(self.tasks), return_exceptions=True)
        if self.pool is not None:
            await self.pool.close()

    def refuse_if_closing(self) -> None:
        if self._closing:
            raise ApiError(
                503,
                "shutting_down",
                "the server is shutting down; start it again and create a new session",
            )
