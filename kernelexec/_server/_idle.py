"""Idle sessions: suspended (or culled) when idle, resumed when used, and the store's age.

A session idle past the server's idle timeout is suspended (``suspend``): its
variables are checkpointed into the store and its kernel shut down; the next
request that needs a kernel restores them into a new one in the same work dir
first (``resume``). A suspend never loses what the kernel holds for a reason
that is not the object itself: a full disk (or the disk budget), an I/O error
or a timeout leaves the session running, logged, and it is tried again after
its next idle period. A variable that cannot be pickled at all (a socket, a
generator) does not stop a suspend: the resumed session's result names it. A
kernel that can never be checkpointed (dead, or without cloudpickle) is
culled, as every idle session is with ``suspend`` off: its kernel is shut
down and its state lost. Checkpoints older than the store's age policy are
removed (``expire_checkpoints``), a suspended session's too, which is then culled.
"""

from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .._exceptions import (
    CheckpointError,
    ConfigurationError,
    DiskSpaceError,
    KernelexecError,
    KernelStartError,
    SessionClosedError,
)
from .._session._async import AsyncSession
from .._state._manifest import Checkpoint, RestoreReport
from ._checkpoints import UnknownCheckpoint
from ._entry import Entry, why_culled
from ._errors import ApiError, closed_meanwhile, no_room

if TYPE_CHECKING:
    from ._registry import Registry

__all__ = [
    "CHECKPOINT_TIMEOUT",
    "VARIABLE_TIMEOUT",
    "cull_idle",
    "expire_checkpoints",
    "housekeep_forever",
    "left_behind",
    "restore_into",
    "resume",
    "suspend",
    "with_id",
]

log = logging.getLogger("kernelexec.server")

EXPIRY_PERIOD = 60.0  # seconds between two sweeps of the store's age policy
CHECKPOINT_TIMEOUT = 300.0  # seconds a checkpoint (or a restore) may take in the kernel
VARIABLE_TIMEOUT = 30.0  # seconds one variable may take to pickle or load


async def cull_idle(registry: Registry) -> list[str]:
    """Suspends (or culls) the sessions idle past the idle timeout; their ids.

    Each runs as a task of its own, so a slow checkpoint holds up no other.
    """
    if registry.config.idle_timeout is None or registry.closing:
        return []
    deadline = time.time() - registry.config.idle_timeout
    idle = [
        e
        for e in registry.entries()
        if not (e.culled or e.suspended or e.suspending or e.starting or e.busy or e.lost)
        and e.last_activity < deadline
    ]
    for entry in idle:
        entry.suspending = True  # before the await: its state says so at once
        task = asyncio.get_running_loop().create_task(suspend(registry, entry))
        registry.tasks.add(task)
        task.add_done_callback(registry.tasks.discard)
    return [e.id for e in idle]


async def housekeep_forever(registry: Registry) -> None:
    """Until cancelled: suspends (or culls) idle sessions every few seconds, and
    applies the store's age policy every minute."""
    period = EXPIRY_PERIOD
    if registry.config.idle_timeout is not None:
        period = min(max(registry.config.idle_timeout / 4, 0.2), 10.0)
    expired_at = time.monotonic()
    while True:
        await asyncio.sleep(period)
        await cull_idle(registry)
        if time.monotonic() - expired_at >= EXPIRY_PERIOD:
            expired_at = time.monotonic()
            await expire_checkpoints(registry)


async def suspend(registry: Registry, entry: Entry) -> None:
    """Checkpoints an idle session and shuts its kernel down.

    Anything that would leave state behind for a reason other than the
    object itself keeps the kernel (tried again after the next idle
    period); a kernel that can never be checkpointed is culled.
    """
    try:
        async with entry.lock:
            if entry.busy or entry.deleted or registry.closing or entry.session.closed:
                return  # used (or going) since it was found idle
            entry.idle_for = time.time() - entry.last_activity
            if not registry.config.suspend:
                await cull(registry, entry, None)
                return
            try:
                checkpoint_id, saved = await registry.make_checkpoint(entry, files=False)
            except SessionClosedError:
                return
            except (KernelexecError, ApiError) as exc:
                if entry.busy or entry.deleted or registry.closing:
                    return
                message = getattr(exc, "message", None) or str(exc)
                if isinstance(exc, CheckpointError) and not exc.transient:
                    await cull(registry, entry, message)  # it will never be checkpointed
                else:
                    keep_running(registry, entry, message)  # a full disk, a timeout, ...
                return
            held_back = left_behind(saved)
            if entry.busy or entry.deleted or registry.closing or held_back:
                # A request came while the state was saved (it runs on this kernel),
                # or the checkpoint would lose what need not be lost.
                await asyncio.to_thread(registry.remove_checkpoint, checkpoint_id)
                if held_back and not (entry.busy or entry.deleted or registry.closing):
                    keep_running(registry, entry, held_back)
                return
            entry.suspend_id = checkpoint_id
            registry.store.suspends[checkpoint_id] = entry.id
            if not await registry.save(entry):
                # Not recorded: a restart would not find it. It stays as it is.
                entry.suspend_id = None
                registry.store.suspends.pop(checkpoint_id, None)
                await asyncio.to_thread(registry.remove_checkpoint, checkpoint_id)
                keep_running(registry, entry, "its record could not be written")
                return
            await entry.session.close()
            log.info(
                "suspended session %s after %.0f s idle (checkpoint %s)",
                entry.id,
                entry.idle_for,
                checkpoint_id,
            )
    finally:
        entry.suspending = False


def keep_running(registry: Registry, entry: Entry, why: str) -> None:
    entry.touch()  # idle again from now: tried again after the next idle period
    log.warning(
        "session %s was not suspended and keeps running with all its state: %s; "
        "tried again after %.0f s more idle",
        entry.id,
        why,
        registry.config.idle_timeout or 0,
    )


async def cull(registry: Registry, entry: Entry, why: str | None) -> None:
    entry.culled, entry.why_culled = True, why
    await entry.session.close()
    await registry.save(entry)
    log.info("culled session %s after %.0f s idle%s", entry.id, entry.idle_for, why_culled(why))


async def resume(registry: Registry, entry: Entry) -> None:
    """Restores a suspended session into a new kernel in its work dir; the lock is held.

    A checkpoint that cannot be restored leaves a new, empty kernel, and
    the report says why. HTTP 429 at ``max_sessions``, 503 if no kernel
    starts, 507 if the disk has no room to stage the state: the session
    stays suspended, its checkpoint kept.
    """
    assert entry.suspend_id is not None
    registry.refuse_if_closing()
    registry.check_room("; a suspended session needs a kernel of its own to resume")
    settings = (entry.kernel_name, entry.env, entry.timeout, entry.options)
    registry.reserved += 1
    try:
        try:
            saved = await asyncio.to_thread(registry.store.open, entry.suspend_id)
            session = await restore_into(saved, entry.work_dir, registry.session_kwargs(*settings))
            report = with_id(session.restore_report, entry.suspend_id)
        except (CheckpointError, UnknownCheckpoint) as exc:
            session = AsyncSession(entry.work_dir, **registry.session_kwargs(*settings))
            try:
                await session.start()
            except BaseException:
                await session.close()
                raise
            report = RestoreReport(
                checkpoint=entry.suspend_id,
                message=f"Its state could not be restored ({exc}); the new kernel started empty.",
            )
    except DiskSpaceError as exc:
        raise no_room(f"cannot resume the suspended session: {exc}") from None
    except KernelStartError as exc:
        raise ApiError(503, "kernel_start_failed", f"cannot resume: {exc}") from None
    except ConfigurationError as exc:
        raise ApiError(503, "kernel_start_failed", f"cannot resume: {exc}") from None
    finally:
        registry.reserved -= 1
    if entry.deleted or registry.closing:
        await session.close()
        raise closed_meanwhile()
    checkpoint_id = entry.suspend_id
    entry.session, entry.resumed, entry.suspend_id = session, report, None
    registry.store.suspends.pop(checkpoint_id, None)
    # Recorded as live before its checkpoint goes: a crash between the two leaves an
    # ordinary checkpoint in the store, never a record naming one that is gone.
    if await registry.save(entry):
        await asyncio.to_thread(registry.remove_checkpoint, checkpoint_id)
    log.info("resumed session %s", entry.id)


async def expire_checkpoints(registry: Registry) -> list[str]:
    """Applies the store's age policy; the ids removed.

    A suspended session whose checkpoint is that old is culled (its files
    stay), unless it is being resumed right now.
    """
    max_age = registry.config.checkpoint_max_age
    if max_age is None or registry.closing:
        return []
    removed = []
    for checkpoint_id in registry.store.expired(max_age):
        owner = registry.lookup(registry.store.suspends.get(checkpoint_id, ""))
        if owner is not None:
            if owner.lock.locked() or owner.suspend_id != checkpoint_id:
                continue
            owner.suspend_id = None
            registry.store.suspends.pop(checkpoint_id, None)
            days = max_age / 86400
            await cull(
                registry,
                owner,
                f"it stayed suspended longer than the store keeps checkpoints "
                f"({days:g} days, --checkpoint-max-age-days), so its checkpoint was removed",
            )
        await asyncio.to_thread(registry.remove_checkpoint, checkpoint_id)
        removed.append(checkpoint_id)
        log.info("removed checkpoint %s: older than %.0f s", checkpoint_id, max_age)
    return removed


def left_behind(saved: Checkpoint) -> str | None:
    """Why a checkpoint for a suspend would lose what need not be lost, or None.

    A variable left out because it cannot be pickled (a socket, a
    generator) would be lost however the suspend went; one left out for any
    other reason (a timeout, an I/O error, no memory) might not be next
    time, so the kernel is kept rather than lose it now.
    """
    skipped = saved.manifest.get("skipped", [])
    passing = [s for s in skipped if s.get("cause", "object") != "object"]
    if not passing:
        return None
    return "its checkpoint would leave out " + "; ".join(
        f"{s['name']} ({s['type']}): {s['reason']}" for s in passing[:5]
    )


async def restore_into(saved: Checkpoint, work_dir: Path, kwargs: dict[str, Any]) -> AsyncSession:
    """A new session in ``work_dir`` with the checkpoint restored into its kernel."""
    return await AsyncSession.restore(
        saved,
        work_dir,
        load_timeout=CHECKPOINT_TIMEOUT,
        variable_timeout=VARIABLE_TIMEOUT,
        **kwargs,
    )


def with_id(report: RestoreReport | None, checkpoint_id: str | None) -> RestoreReport:
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
